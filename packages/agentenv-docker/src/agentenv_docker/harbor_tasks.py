"""The ``harbor`` task source: Harbor task directories, read through the ``harbor`` package's own task model.

::

    envs:
      harbor: {kind: harbor}
    tasks: {source: harbor, path: tasks, split: train}

Each folder under ``path`` with a ``task.toml`` is one task, loaded by ``harbor.models.task.task.Task`` (its
``task.toml`` model, instruction and file layout are Harbor's). It becomes an agentenv task with one turn: the
prompt is the instruction, the toolset the ``harbor`` env's ``bash`` tool in a container of the task's image, the
verifier (``kind: harbor``) runs ``tests/test.sh`` in that container and reads the reward as Harbor's verifier
does, and the reference solution is one ``bash`` call that copies ``solution/`` to ``/solution`` and runs
``solve.sh`` there (as Harbor's oracle agent does). What a task asks that agentenv cannot honour is refused here,
at load, naming the task's ``task.toml`` and the field.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import re
import shlex
import sys
import tarfile
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Final

from agentenv.bundle import RawTask
from agentenv.errors import BundleProblem
from agentenv.specs import BASH_TOOL, BUNDLE_FILE
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import engine

__all__ = [
    "INSTALL",
    "config_of",
    "harbor_missing",
    "image_of",
    "read_harbor_tasks",
    "solve_command",
    "supported",
    "task_dirs",
]

INSTALL: Final[str] = "pip install 'agentenv-docker[harbor]'"
_FIELDS: Final[str] = "path, split, env"
_SLUG = re.compile(r"[^a-z0-9._-]+")


@functools.cache
def supported() -> str:
    """The harbor versions this source reads: the ``harbor`` extra of agentenv-docker's pyproject.toml, declared
    there once and read from the installed metadata (``harbor>=0.25,<0.26``)."""
    from packaging.requirements import Requirement

    for text in metadata.requires("agentenv-docker") or []:
        requirement = Requirement(text)
        if requirement.name == "harbor" and requirement.marker and requirement.marker.evaluate({"extra": "harbor"}):
            return f"harbor{requirement.specifier}"
    raise LookupError("agentenv-docker's metadata names no harbor range in its harbor extra; reinstall it")


def harbor_missing() -> str | None:
    """Why the ``harbor`` package cannot be used here, with the fix; None when it can."""
    if sys.version_info < (3, 12):
        found = ".".join(map(str, sys.version_info[:3]))
        return (
            f"the harbor task source needs Python >= 3.12 (harbor does), and this is Python {found}; run agentenv on "
            f"Python 3.12 or newer and {INSTALL}"
        )
    try:
        version = metadata.version("harbor")
    except metadata.PackageNotFoundError:
        return f"the harbor task source needs the harbor package, which is not installed; {INSTALL}"
    wanted = supported()
    if Version(version) not in SpecifierSet(wanted.removeprefix("harbor")):
        return f"harbor {version} is installed and this source reads {wanted}; {INSTALL}"
    return None


def task_dirs(folder: Path) -> list[Path]:
    """The Harbor task folders at ``folder``: itself when it holds a ``task.toml``, else its subfolders that do."""
    if (folder / "task.toml").is_file():
        return [folder]
    return sorted(d for d in folder.iterdir() if (d / "task.toml").is_file()) if folder.is_dir() else []


def image_of(task_dir: Path, name: str) -> str:
    """The image of a task: named for the task, tagged with a digest of its ``environment/`` folder (a changed
    Dockerfile or build file is another image)."""
    digest = hashlib.sha256()
    environment = task_dir / "environment"
    for path in sorted(p for p in environment.rglob("*") if p.is_file()):
        digest.update(path.relative_to(environment).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    slug = _SLUG.sub("-", name.lower()).strip("-._")[:100] or "task"
    return f"agentenv-harbor/{slug}:{digest.hexdigest()[:16]}"


def solve_command(solution_dir: Path, script: str, env: Mapping[str, str] | None = None) -> str:
    """The reference solution as one ``bash`` command: ``solution/`` unpacked at ``/solution``, then ``script`` run
    there with ``env`` (task.toml's ``solution.env``), as Harbor's oracle agent runs it. The files travel in the
    command, so the policy's container never holds them."""
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        for path in sorted(solution_dir.rglob("*")):
            tar.add(path, arcname=path.relative_to(solution_dir).as_posix(), recursive=False)
    blob = base64.b64encode(packed.getvalue()).decode()
    environ = {"DEBIAN_FRONTEND": "noninteractive", **(env or {})}
    assigned = " ".join(f"{key}={shlex.quote(value)}" for key, value in environ.items())
    run = shlex.quote(f"/solution/{script}")
    unpack = f"mkdir -p /solution && echo {blob} | base64 -d | tar -xzf - -C /solution"
    return f"{unpack} && chmod +x {run} && {assigned} {run}"


def config_of(config: Any) -> tuple[Path | None, str, str, list[BundleProblem]]:
    problems = []
    if not isinstance(config, Mapping) or not isinstance(config.get("path"), str):
        fix = "give the folder of the Harbor task directories: tasks: {source: harbor, path: tasks}"
        return None, "", "", [BundleProblem(BUNDLE_FILE, "tasks.path", f"missing; {fix}")]
    for key in sorted(set(config) - {"path", "split", "env"}):
        problems.append(BundleProblem(BUNDLE_FILE, f"tasks.{key}", f"unknown field; the harbor source takes {_FIELDS}"))
    split, env = config.get("split", "train"), config.get("env", "harbor")
    for key, value in (("split", split), ("env", env)):
        if not isinstance(value, str):
            problems.append(BundleProblem(BUNDLE_FILE, f"tasks.{key}", f"{value!r} is not a name"))
    return Path(config["path"]), str(split), str(env), problems


def read_harbor_tasks(config: Any, bundle_dir: Path) -> Iterator[RawTask | BundleProblem]:
    """Harbor task directories (``task.toml``, ``instruction.md``, ``environment/Dockerfile``, ``tests/``,
    ``solution/``) under ``path``, read by the harbor package (Python >= 3.12: ``pip install
    'agentenv-docker[harbor]'``), played in the bundle's ``kind: harbor`` env (``env``, default ``harbor``), in
    ``split`` (default ``train``)."""
    missing = harbor_missing()
    if missing is not None:
        yield BundleProblem(BUNDLE_FILE, "tasks.source", missing)
        return
    from harbor.models.task.task import Task as HarborTask
    from pydantic import ValidationError

    from . import harbor_refusals
    from .kind import image_missing

    path, split, env, problems = config_of(config)
    yield from problems
    if path is None or problems:
        return
    if not _declares(bundle_dir, env):
        fix = f"declare it: envs: {{{env}: {{kind: harbor}}}} (or name yours: tasks: {{source: harbor, env: NAME}})"
        message = f"the harbor source's tasks play in an env {env!r} of kind harbor; {fix}"
        yield BundleProblem(BUNDLE_FILE, "envs", message)
        return
    engine_missing = _engine_missing()
    if engine_missing is not None:
        yield BundleProblem(BUNDLE_FILE, "tasks.source", engine_missing)
        return
    found = task_dirs(bundle_dir / path)
    if not found:
        message = f"no Harbor task directory (a folder with a task.toml) in {bundle_dir / path}; fix the path"
        yield BundleProblem(BUNDLE_FILE, "tasks.path", message)
    for task_dir in found:
        shown = (task_dir / "task.toml").relative_to(bundle_dir).as_posix()
        try:
            task = HarborTask(task_dir)
        except (ValidationError, ValueError, OSError, RuntimeError) as exc:
            yield BundleProblem(shown, "", f"harbor cannot read this task: {exc}; fix it as Harbor's task format says")
            continue
        refused = list(harbor_refusals.refusals(task, shown))
        image = image_of(task_dir, task.name)
        if not refused and image_missing(image):
            message = f"the image {image!r} of Harbor task {task.name!r} is not on this machine's Docker engine"
            refused = [BundleProblem(shown, "environment", f"{message}; build it: agentenv image build {bundle_dir}")]
        if refused:
            yield from refused
            continue
        yield RawTask(_task_data(task, task_dir, bundle_dir, split, env, image), shown)


def _engine_missing() -> str | None:
    """Why no task can run here (no Docker engine answers), once for the whole source; None when one answers."""
    try:
        engine.engine()
    except engine.EngineMissing as exc:
        return f"Harbor tasks run in containers: {exc}"
    return None


def _declares(bundle_dir: Path, env: str) -> bool:
    """Whether bundle.yaml declares ``env`` as a ``kind: harbor`` env (read again: a source sees only its fields)."""
    import yaml

    try:
        data = yaml.safe_load((bundle_dir / BUNDLE_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return True  # the loader says what is wrong with the file
    envs = data.get("envs") if isinstance(data, dict) else None
    spec = envs.get(env) if isinstance(envs, dict) else None
    return isinstance(spec, dict) and spec.get("kind") == "harbor"


def _task_data(task: Any, task_dir: Path, bundle_dir: Path, split: str, env: str, image: str) -> dict[str, Any]:
    """The agentenv task of a Harbor task (its ``metadata.harbor`` is what the env and verifier read)."""
    config = task.config
    solve = task.paths.discovered_solve_path_for(config.environment.os)
    solution = None
    if solve is not None:
        script = solve.relative_to(task.paths.solution_dir).as_posix()
        command = solve_command(task.paths.solution_dir, script, config.solution.env)
        solution = [{"calls": [{"tool": BASH_TOOL, "args": {"command": command}}], "reply": "done"}]
    harbor = {
        "name": task.name,
        "dir": task_dir.relative_to(bundle_dir).as_posix(),
        "image": image,
        "workdir": config.environment.workdir,
        "env": dict(config.environment.env),
        "cpus": config.environment.cpus,
        "memory_mb": config.environment.memory_mb,
        "agent_user": config.agent.user,
        "agent_timeout_sec": config.agent.timeout_sec,
        "verifier_user": config.verifier.user,
        "verifier_env": dict(config.verifier.env),
        "verifier_timeout_sec": config.verifier.timeout_sec,
        "test": task.paths.discovered_test_path_for(config.environment.os).relative_to(task.paths.tests_dir).as_posix(),
    }
    return {
        "id": task_dir.name,
        "split": split,
        "toolset": {"envs": [env]},
        "turns": [{"prompt": task.instruction, "verifiers": [{"id": "tests", "kind": "harbor"}]}],
        "solution": solution,
        "metadata": {"harbor": harbor, "harbor_metadata": dict(config.metadata)},
    }
