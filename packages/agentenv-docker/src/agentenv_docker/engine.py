"""The Docker engine, driven through its own command-line client.

Why the CLI and not a Python client of the Engine API: an env's program speaks agentenv's JSON lines on the
stdin and stdout of ``docker run -i``, so a container env is core's ``SubprocessEnv`` over one more program
(its deadlines, crash detection, stderr tail and owned process group); the CLI is what the engine's own
package installs, at the engine's version; and the reaper, which removes a dead owner's containers, runs
with the standard library only. ``$AGENTENV_DOCKER`` names another client binary (``podman`` is not tested).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from agentenv.errors import AgentEnvError
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = [
    "SUPPORTED",
    "Engine",
    "EngineMissing",
    "Result",
    "arun",
    "client",
    "engine",
    "how_to_start",
    "run",
    "unreachable",
]

SUPPORTED: Final[str] = ">=20.10"
"""The Docker versions (engine and CLI) agentenv-docker supports, declared once: 20.10 is the first whose CLI has
``docker run --pull never`` (no registry is ever asked). Tested on 20.10.24 (Debian 12's docker.io) and a 28.2 CLI."""

CLIENT_VAR: Final[str] = "AGENTENV_DOCKER"


class EngineMissing(AgentEnvError):
    """No Docker engine answers (or its CLI is missing, or outside ``SUPPORTED``); the message says how to start one."""


@dataclass(frozen=True)
class Engine:
    """The engine that answered: the CLI's and the server's versions."""

    client: str
    server: str
    api: str


@dataclass(frozen=True)
class Result:
    """What one CLI command did."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def how_to_start() -> str:
    """The fix for a missing engine, as a message ends with it."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return (
        f"agentenv-docker needs a Docker engine at {where} (DOCKER_HOST). Start one as root: "
        "'systemctl start docker', or 'dockerd --bridge=none --iptables=false --ip-masq=false &' "
        "(agentenv's containers need no default bridge); install it with 'apt-get install docker.io'"
    )


def client() -> str:
    """The path of the docker CLI (``$AGENTENV_DOCKER``, else ``docker`` on PATH); ``EngineMissing`` if none."""
    name = os.environ.get(CLIENT_VAR) or "docker"
    found = shutil.which(name)
    if found is None:
        raise EngineMissing(f"the Docker CLI {name!r} is not on PATH. {how_to_start()}")
    return found


def run(args: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> Result:
    """Run ``docker ARGS`` and wait (at most ``timeout`` seconds: then code 124)."""
    try:
        done = subprocess.run(
            [client(), *args], input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return Result(124, "", f"docker {' '.join(args[:2])} did not finish within {timeout:g} s")
    return Result(done.returncode, done.stdout, done.stderr)


async def arun(args: Sequence[str], *, timeout: float = 60.0) -> Result:
    """``run`` on the event loop (the CLI as an asyncio subprocess, killed past ``timeout``)."""
    process = await asyncio.create_subprocess_exec(
        client(),
        *args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return Result(124, "", f"docker {' '.join(args[:2])} did not finish within {timeout:g} s")
    return Result(process.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def unreachable(err: str) -> bool:
    """Whether the CLI's stderr says the engine does not answer (as opposed to refusing a request)."""
    text = err.lower()
    return any(
        s in text
        for s in (
            "cannot connect to the docker daemon",
            "is the docker daemon running",
            "error during connect",
            "connection refused",
            "no such file or directory",
        )
    )


@functools.cache
def _checked(host: str | None, cli: str) -> Engine:
    del host, cli  # the cache key: another engine or client is checked again
    done = run(["version", "--format", "{{json .}}"], timeout=30)
    if not done.ok:
        detail = done.err.strip().splitlines()[-1] if done.err.strip() else f"exit code {done.code}"
        raise EngineMissing(f"no Docker engine answers ({detail}). {how_to_start()}")
    info = json.loads(done.out)
    found = Engine(
        client=str(info.get("Client", {}).get("Version", "?")),
        server=str((info.get("Server") or {}).get("Version", "?")),
        api=str((info.get("Server") or {}).get("ApiVersion", "?")),
    )
    for what, version in (("engine", found.server), ("CLI", found.client)):
        if not _fits(version):
            raise EngineMissing(
                f"the Docker {what} is {version}; agentenv-docker supports docker{SUPPORTED}. "
                "Install a newer one (apt-get install docker.io on Debian 12 or later)"
            )
    return found


def _fits(version: str) -> bool:
    try:
        return Version(version.split("+")[0].split("-")[0]) in SpecifierSet(SUPPORTED)
    except InvalidVersion:
        return True  # a build that names itself oddly (a distribution's, a nightly): let it try


def engine() -> Engine:
    """The engine the CLI reaches, checked against ``SUPPORTED`` once per process (a failure is asked again)."""
    return _checked(os.environ.get("DOCKER_HOST"), os.environ.get(CLIENT_VAR, "docker"))
