"""The ``container`` env kind: its check at load (fields, engine, image), its tools listed at load, its envs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from agentenv.engine import list_tools
from agentenv.env import Tool
from agentenv.plugins import EnvKind, Problem
from agentenv.specs import EnvSpec

from . import engine, owners
from .env import ContainerEnv, run_args
from .spec import options_of, problems

__all__ = ["CONTAINER", "image_missing"]

_swept = threading.Event()  # what dead owners left is removed once per process, at the first check


def image_missing(image: str) -> bool:
    """Whether the engine lacks ``image`` (it never pulls one)."""
    return not engine.run(["image", "inspect", "--format", "{{.Id}}", image], timeout=30).ok


def _check(spec: EnvSpec, bundle_dir: Path) -> Iterator[Problem]:
    found = list(problems(spec, bundle_dir))
    if found:
        yield from found
        return
    try:
        engine.engine()
    except engine.EngineMissing as exc:
        yield Problem((), f"kind 'container' needs a Docker engine: {exc}")
        return
    if not _swept.is_set():
        _swept.set()
        owners.remove_gone_owners()
    options = options_of(spec)
    if image_missing(options.image):
        how = (
            f"build it: agentenv image build {bundle_dir}"
            if options.build
            else "build it (docker build) or load it (docker load), or give a build folder and run agentenv image build"
        )
        missing = f"image {options.image!r} is not on this machine's Docker engine (none is pulled)"
        yield Problem(("image",), f"{missing}; {how}")


def _describe(spec: EnvSpec, bundle_dir: Path) -> list[Tool] | None:
    """Run the image once with no network, ask for the tools, and remove it."""
    args = run_args(spec, options_of(spec), bundle_dir, owners.owner_labels())
    return list_tools([engine.client(), args[0], "--rm", *args[1:]], cwd=bundle_dir, timeout=120)


def _create(spec: EnvSpec, bundle_dir: Path) -> ContainerEnv:
    """A program in a container of ``image`` speaking JSON lines on stdin/stdout (``docker run -i``): no network,
    limits, the bundle's declared files read-only, a workdir volume removed at teardown."""
    return ContainerEnv(spec, bundle_dir)


CONTAINER: Final[EnvKind] = EnvKind("container", _create, _describe, _check)
