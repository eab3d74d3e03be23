"""The fields of a ``kind: container`` env in bundle.yaml, and what is wrong with them.

::

    envs:
      box:
        kind: container
        image: agentenv-examples/box:1      # on this machine's engine; agentenv image build makes it from build
        build: box                          # a folder of the bundle with a Dockerfile
        command: [python3, /env/env.py]     # the program in the container: agentenv's JSON lines on stdin/stdout
        mounts: {data/fixture.json: /data/fixture.json}   # bundle files, read-only, only these
        limits: {memory: 512m, pids: 128, cpus: 1}
        network: none                       # or episode: a network made for the episode alone
        env: {LOG_LEVEL: info}
        setup: false                        # true: the program is sent the task (setup request) after its deploy
        config: {fixture: /data/fixture.json}
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from agentenv.plugins import Problem
from agentenv.specs import EnvSpec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["FIELDS", "WORKDIR", "ContainerOptions", "Limits", "options_of", "problems"]

WORKDIR: Final[str] = "/work"
FIELDS: Final[str] = "image, build, command, mounts, limits, network, env, pass_env, read_only, setup, config, roles"
_MEMORY = re.compile(r"^[0-9]+[bkmg]?$", re.IGNORECASE)
# a reference the engine accepts: [host[:port]/]path[:tag][@digest]; lower case, as Docker wants it
_IMAGE = re.compile(r"^[a-z0-9]+([._/:@-][a-zA-Z0-9_.-]+)*$")


class Limits(BaseModel):
    """What one episode's container may use (Docker's ``--memory``, ``--pids-limit``, ``--cpus``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory: str = "1g"
    """Memory and swap together (Docker's units: ``512m``, ``2g``, bytes without a unit)."""
    pids: int = Field(256, ge=8)
    """Processes and threads at once."""
    cpus: float = Field(1.0, gt=0)
    """CPU time, in CPUs (``0.5``: half of one)."""

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str:
        text = str(value).strip()
        if not _MEMORY.match(text):
            raise ValueError(f"{value!r} is no amount of memory; write it as Docker does: 512m, 2g")
        return text.lower()


class ContainerOptions(BaseModel):
    """The container env's own fields (``EnvSpec.options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    """The image to run, as the engine names it; never pulled (no registry is asked)."""
    build: str | None = None
    """A folder of the bundle holding the image's Dockerfile (``agentenv image build`` builds it)."""
    mounts: dict[str, str] = Field(default_factory=dict)
    """Bundle files or folders mounted read-only, bundle path -> absolute path in the container."""
    limits: Limits = Field(default_factory=Limits)
    network: Literal["none", "episode"] = "none"
    """``none``: no network at all; ``episode``: a network made for this episode alone, removed at teardown."""
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Environment variables of the program (nothing of the server's environment reaches it)."""
    read_only: bool = True
    """The image's files read-only (the workdir, ``/work``, and ``/tmp`` are writable)."""
    setup: bool = False
    """The program takes the ``setup`` request (the task's id, split and metadata) after its deploy: the task's own
    state, for a container deployed before its task is known (``agentenv serve --warm``)."""

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _IMAGE.match(value):
            raise ValueError(f"{value!r} is no image reference; name it as docker does (name:tag, lower case)")
        return value


def options_of(spec: EnvSpec) -> ContainerOptions:
    """The container fields of ``spec`` (``ValidationError`` when they are wrong: ``problems`` says so first)."""
    return ContainerOptions.model_validate(spec.options)


def problems(spec: EnvSpec, bundle_dir: Path) -> Iterator[Problem]:
    """What is wrong with the fields alone (not the engine or the image): each at its field, with the fix."""
    if spec.target is not None:
        yield Problem(("target",), "'target' is for python envs; a container env gives its program in 'command'")
    if not spec.command or not all(isinstance(c, str) for c in spec.command):
        yield Problem(("command",), "missing 'command'; give the image's program as a list: [python3, /env/env.py]")
    try:
        options = options_of(spec)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = f"unknown field; a container env takes {FIELDS}"
            elif error["type"] == "missing":
                message = "missing; name the image to run (image: name:tag); agentenv image build makes it from build"
            yield Problem(loc, message)
        return
    yield from _paths(options, bundle_dir)


def _paths(options: ContainerOptions, bundle_dir: Path) -> Iterator[Problem]:
    root = bundle_dir.resolve()
    if options.build is not None:
        folder = (bundle_dir / options.build).resolve()
        if not folder.is_relative_to(root) or not (folder / "Dockerfile").is_file():
            yield Problem(("build",), f"{options.build!r} is no folder of the bundle with a Dockerfile in it")
    inside: dict[str, str] = {}
    for source, target in options.mounts.items():
        where = bundle_dir / source
        if not where.resolve().is_relative_to(root) or not where.exists():
            yield Problem(("mounts", source), "no such file or folder in the bundle; mount the bundle's own files")
        if not PurePosixPath(target).is_absolute():
            yield Problem(("mounts", source), f"{target!r}: give the path in the container as an absolute path")
        elif PurePosixPath(target) == PurePosixPath(WORKDIR) or PurePosixPath(WORKDIR) in PurePosixPath(target).parents:
            yield Problem(("mounts", source), f"{target!r} is inside the workdir {WORKDIR}; mount it elsewhere")
        elif target in inside:
            yield Problem(("mounts", source), f"{target!r} is where {inside[target]!r} is mounted already")
        inside[target] = source
