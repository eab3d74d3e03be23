"""Images built on this machine, from nothing a registry serves.

``build_bundle(BUNDLE)`` builds each container env's image from the Dockerfile in its ``build`` folder
(``docker build`` with no network for its ``RUN`` steps; the Dockerfile's base must be on the engine:
``ARG BASE`` / ``FROM ${BASE}`` takes it from ``--base``). ``build_base(NAME)`` makes a Python-capable base
image from Debian's packages: ``debootstrap --variant=minbase --include=python3 SUITE DIR`` (debootstrap's
own default mirror), then ``tar -C DIR -c . | docker import``. It needs root and debootstrap
(``apt-get install debootstrap``) and takes a couple of minutes; the image is labelled with a key of what
went into it, so a second call with the same recipe finds it and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from agentenv import find_bundle
from agentenv.errors import AgentEnvError
from agentenv.specs import EnvSpec
from pydantic import ValidationError

from . import engine
from .spec import options_of, problems

__all__ = [
    "BASE_LABEL",
    "ImageError",
    "base_key",
    "build_base",
    "build_bundle",
    "build_image",
    "container_envs",
    "harbor_images",
]

BASE_LABEL: Final[str] = "agentenv.base-key"
_RECIPE: Final[int] = 1  # bumped when build_base changes what it makes


class ImageError(AgentEnvError):
    """An image could not be built; the message names the env, the step and the fix."""


def container_envs(bundle: str | Path) -> dict[str, EnvSpec]:
    """The container envs of a bundle, read from its bundle.yaml without loading it (their images may not exist)."""
    path = Path(bundle) / "bundle.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ImageError(f"{path}: cannot read it: {exc}") from None
    envs = (data or {}).get("envs") or {}
    found = {}
    for name, raw in envs.items() if isinstance(envs, dict) else ():
        if isinstance(raw, dict) and raw.get("kind") == "container":
            try:
                found[str(name)] = EnvSpec.model_validate({**raw, "name": str(name)})
            except ValidationError as exc:
                raise ImageError(f"{path}: envs.{name}: {exc}") from None
    return found


def build_bundle(
    bundle: str | Path, *, base: str | None = None, only: Sequence[str] = (), echo: Callable[[str], None] = print
) -> list[str]:
    """Build the image of each container env of ``bundle`` that has a ``build`` folder, and of each Harbor task its
    ``tasks: {source: harbor}`` reads (not with ``only``); returns the images built."""
    root = find_bundle(bundle).resolve()
    envs = container_envs(root)
    unknown = sorted(set(only) - set(envs))
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise ImageError(f"{root}: no container env {names}; its container envs: {', '.join(sorted(envs))}")
    engine.engine()
    if base is not None and engine.run(["image", "inspect", base]).code != 0:
        raise ImageError(f"the base image {base!r} is not on the engine; make one: agentenv image base {base}")
    built: list[str] = []
    for name, spec in envs.items():
        if only and name not in only:
            continue
        wrong = list(problems(spec, root))
        if wrong:
            raise ImageError(f"{root / 'bundle.yaml'}: envs.{name}: " + "; ".join(map(str, wrong)))
        options = options_of(spec)
        if options.build is None:
            echo(f"{name}: no build folder; {options.image} is used as it is on the engine")
            continue
        if options.image in built:
            continue
        echo(f"{name}: building {options.image} from {options.build}/Dockerfile")
        try:
            build_image(root / options.build, options.image, base=base, labels={"agentenv.bundle": root.name})
        except ImageError as exc:
            raise ImageError(f"envs.{name}: {exc}") from None
        built.append(options.image)
    tasks = _harbor_tasks(root)
    if tasks is not None and not only:
        built += harbor_images(root, tasks, echo=echo)
    return built


def _harbor_tasks(root: Path) -> dict[str, object] | None:
    """bundle.yaml's ``tasks`` when they are read by the harbor task source (each task's image is built too)."""
    data = yaml.safe_load((root / "bundle.yaml").read_text()) or {}
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict) or tasks.get("source") != "harbor":
        return None
    return {k: v for k, v in tasks.items() if k != "source"}


def build_image(
    folder: str | Path, image: str, *, base: str | None = None, labels: Mapping[str, str] | None = None
) -> str:
    """``docker build`` of the Dockerfile in ``folder`` as ``image``, with no network for its ``RUN`` steps and
    nothing pulled; ``base`` is given to it as its ``BASE`` argument. ``ImageError`` with the build's output."""
    args = ["build", "--network", "none", "-q", "-t", image]
    for key, value in (labels or {}).items():
        args += ["--label", f"{key}={value}"]
    if base is not None:
        args += ["--build-arg", f"BASE={base}"]
    # the classic builder: BuildKit needs the buildx plugin on newer CLIs, which Debian's docker.io lacks
    environ = {**os.environ, "DOCKER_BUILDKIT": "0"}
    done = subprocess.run(
        [engine.client(), *args, str(folder)], capture_output=True, text=True, env=environ, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise ImageError(f"docker build of {image} failed:\n{done.stderr.strip()[-2000:]}")
    return image


def base_key(suite: str, include: Sequence[str]) -> str:
    """The key of a base image's recipe: what went into it (a changed recipe is another image)."""
    text = json.dumps({"recipe": _RECIPE, "suite": suite, "include": sorted(include), "variant": "minbase"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_base(
    name: str,
    *,
    suite: str = "bookworm",
    include: Sequence[str] = ("python3",),
    echo: Callable[[str], None] = print,
) -> str:
    """Make the base image ``name`` with Debian's debootstrap unless the engine has it from this recipe already."""
    key = base_key(suite, include)
    have = engine.run(["image", "inspect", "--format", f'{{{{index .Config.Labels "{BASE_LABEL}"}}}}', name])
    if have.ok and have.out.strip() == key:
        echo(f"{name}: on the engine already (recipe {key})")
        return name
    tool = shutil.which("debootstrap") or shutil.which("/usr/sbin/debootstrap")
    if tool is None:
        raise ImageError("debootstrap is not installed; install it: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ImageError("debootstrap needs root (it makes device files and a chroot); run this as root")
    engine.engine()
    with tempfile.TemporaryDirectory(prefix="agentenv-rootfs-") as folder:
        rootfs = Path(folder) / "rootfs"
        echo(f"{name}: debootstrap --variant=minbase --include={','.join(include)} {suite} (a couple of minutes)")
        command = [tool, "--variant=minbase", f"--include={','.join(include)}", suite, str(rootfs)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip()[-2000:]
            raise ImageError(f"debootstrap of {suite} failed (exit code {done.returncode}):\n{tail}")
        changes = ["--change", f"LABEL {BASE_LABEL}={key}", "--change", 'CMD ["python3"]']
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [engine.client(), "import", *changes, "-", name], stdin=tar.stdout, capture_output=True, text=True
        )
        if tar.stdout is not None:
            tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import of {name} failed: {imported.stderr.strip()}")
    echo(f"{name}: made (recipe {key})")
    return name


def harbor_images(bundle: Path, tasks: Any, *, echo: Any = print) -> list[str]:
    """Build the image of each Harbor task of ``tasks: {source: harbor, ...}`` that the engine lacks, from its
    ``environment/`` folder (``docker build``, no network for ``RUN``, nothing pulled); returns the images built."""
    from .harbor_tasks import config_of, harbor_missing, image_of, task_dirs
    from .kind import image_missing

    missing = harbor_missing()
    if missing is not None:
        raise ImageError(missing)
    from harbor.models.task.task import Task as HarborTask

    path, _, _, problems = config_of(tasks)
    if path is None or problems:
        raise ImageError("; ".join(map(str, problems)))
    built = []
    for task_dir in task_dirs(bundle / path):
        task = HarborTask(task_dir)
        image = image_of(task_dir, task.name)
        if not image_missing(image):
            echo(f"{task.name}: {image} is on the engine already")
            continue
        echo(f"{task.name}: building {image} from environment/Dockerfile")
        build_image(task_dir / "environment", image, labels={"agentenv.harbor-task": task.name})
        built.append(image)
    return built
