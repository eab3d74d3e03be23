"""The ``docker`` sandbox backend: each program the policy steers (an agent, a ``bash`` shell, an env program) in a
container of its own on the local Docker engine, through core's seam (``agentenv.sandbox``, hook
``agentenv_sandboxes``). Chosen like any backend: ``agentenv serve --sandbox docker``, ``$AGENTENV_SANDBOX=docker``.

What a program sees in it:

- files: the image's own system (``$AGENTENV_DOCKER_SANDBOX_IMAGE``, default ``DEFAULT_IMAGE``: a base made by
  ``agentenv image base``), read-only; at their host paths, read-only, the files its ``Program`` lists as readable
  (an agent's CLI, its interpreter's packages, the relay) and this process's interpreter (for the relay); read-write
  only the folders it lists as writable (an agent's workdir and HOME); its private folders and ``/tmp`` as fresh
  tmpfs of ``disk_mb``. Nothing else of the host: not the bundle, not the server's secrets, not its verifiers.
- processes: the container's PID namespace (``--init`` reaps what it starts), no capabilities, ``no-new-privileges``,
  the engine's seccomp profile; it runs as this process's uid, so the files it writes are the host's to read.
- network: ``--network none``, only its own loopback: no address at all, private or not. What it must reach (its
  model proxy, its MCP server) is relayed into that loopback through unix sockets in a folder it reads
  (``agentenv.sandbox.relay``). ``network: host`` is refused: a container is never given the host's network.
- limits: memory and swap together (``memory_mb``), processes (``pids``) by the container's cgroup; CPU time and
  file size by ``--ulimit``. The container is labelled with its owner (``owners``): removed when its program ends,
  and by the owner's reaper if the owner dies.
"""

from __future__ import annotations

import functools
import os
import sys
import uuid
from pathlib import Path
from typing import Final

from agentenv.sandbox import Prepared, Program, SandboxUnavailable, procs, signal_breach

from . import engine, owners

__all__ = ["DEFAULT_IMAGE", "IMAGE_VAR", "DockerSandbox"]

IMAGE_VAR: Final[str] = "AGENTENV_DOCKER_SANDBOX_IMAGE"
DEFAULT_IMAGE: Final[str] = "agentenv/python:bookworm"
_REAPER: Final = (sys.executable, "-m", "agentenv_docker.owners")
_MB: Final[int] = 1024 * 1024


def _interpreter() -> tuple[str, ...]:
    """This process's interpreter's folders (the relay runs on it), where they are not the system's."""
    found = {os.path.realpath(p) for p in (sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))}
    return tuple(p for p in sorted(found) if not p.startswith(("/usr/", "/bin", "/lib")))


def _mount(path: Path | str, *, writable: bool = False) -> list[str]:
    text = str(path)
    if "," in text or '"' in text:
        raise SandboxUnavailable(f"docker sandbox: {text!r} cannot be mounted (a comma or a quote in its path)")
    return ["--mount", f"type=bind,src={text},dst={text}" + ("" if writable else ",readonly")]


class DockerSandbox:
    """Runs each ``Program`` in a container of its own (see the module docstring)."""

    name = "docker"
    isolates_processes = True

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get(IMAGE_VAR) or DEFAULT_IMAGE

    @functools.cache  # noqa: B019  # one backend per process, checked once
    def problem(self) -> str | None:
        """Why containers cannot run here (no engine, no image), with the fix; None when they can."""
        try:
            engine.engine()
        except engine.EngineMissing as exc:
            return f"the docker sandbox needs a Docker engine: {exc}"
        if not engine.run(["image", "inspect", "--format", "{{.Id}}", self.image], timeout=30).ok:
            return (
                f"image {self.image!r} is not on the engine (none is pulled): make it with agentenv image base "
                f"{self.image}, or name another with ${IMAGE_VAR}"
            )
        return None

    def describe(self) -> str:
        """What it isolates and which limits are in force."""
        return (
            f"docker: a container of {self.image} per program, --network none (openings relayed), read-only image, "
            "no capabilities; memory and processes by its cgroup, CPU time and file size by ulimit"
        )

    def prepare(self, program: Program) -> Prepared:
        """``docker run`` of ``program`` in a container named for it; its cleanup removes the container."""
        if program.network != "none":
            raise SandboxUnavailable(
                f"{program.name}: the docker sandbox never gives a container the host's network (sandbox.network: "
                "host); keep network: none (its model and MCP endpoints are relayed in), or choose another sandbox"
            )
        procs.at_owner_exit(_REAPER)  # a dead owner's containers are removed by label
        name = f"agentenv-sbx-{uuid.uuid4().hex[:16]}"
        argv = [engine.client(), "run", "-i", "--name", name, *self._args(program), self.image, *program.argv]

        def breach(returncode: int | None) -> str | None:
            state = engine.run(["container", "inspect", "--format", "{{.State.OOMKilled}}", name], timeout=30)
            if state.ok and state.out.strip() == "true":
                return f"memory limit ({program.limits.memory_mb} MiB)"
            return signal_breach(returncode, program.limits)

        def cleanup() -> None:  # after breach() read its state (no --rm); a killed docker CLI leaves it running
            engine.run(["rm", "-f", name], timeout=60)

        # the CLI's own environment is the program's: each -e NAME below takes its value from it
        return Prepared(argv, dict(program.env), program.cwd, cleanup, breach)

    def _args(self, program: Program) -> list[str]:
        limits = program.limits
        args = ["--pull", "never", "--init", "--log-driver", "none", "--network", "none", "--read-only"]
        args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", f"{os.getuid()}:{os.getgid()}"]
        size = "" if limits.disk_mb is None else f":size={limits.disk_mb}m"
        args += ["--tmpfs", f"/tmp{size}"]
        if limits.memory_mb is not None:
            args += ["--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m"]
        if limits.pids is not None:
            args += ["--pids-limit", str(limits.pids)]
        if limits.cpu_seconds is not None:
            args += ["--ulimit", f"cpu={limits.cpu_seconds}"]
        if limits.file_mb is not None:
            args += ["--ulimit", f"fsize={limits.file_mb * _MB}"]
        for path in dict.fromkeys([*_interpreter(), *map(str, program.readable)]):
            args += _mount(path)
        for path in program.writable:
            args += _mount(path, writable=True)
        for path in program.private:
            args += ["--tmpfs", f"{path}{size}"]
        for key in program.env:
            args += ["-e", key]
        for key, value in owners.owner_labels().items():
            args += ["--label", f"{key}={value}"]
        return [*args, "--label", f"agentenv.sandbox={program.name}", "-w", str(program.cwd)]
