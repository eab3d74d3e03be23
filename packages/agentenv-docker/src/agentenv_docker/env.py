"""``ContainerEnv``: a container env's program, run with ``docker run -i``, speaking core's JSON lines.

It is core's ``SubprocessEnv`` with one thing changed, how the program starts: the program is the docker CLI
attached to the container, so the protocol, its deadlines, the crash detection and the stderr tail are core's.
What a process cannot do for a container is done here: the container is named and labelled (``owners``),
removed at teardown with its workdir volume and network, and an exit is explained from the engine's record
(past its memory limit, the engine gone, the image missing).
"""

from __future__ import annotations

import csv
import io
import ipaddress
import os
import random
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from agentenv.engine import SubprocessEnv
from agentenv.errors import EnvCrashed, ToolError
from agentenv.sandbox import procs
from agentenv.specs import EnvSpec

from . import engine, owners
from .spec import WORKDIR, ContainerOptions, options_of

__all__ = ["SUBNETS_VAR", "ContainerEnv", "run_args"]

SUBNETS_VAR: Final[str] = "AGENTENV_DOCKER_SUBNETS"
_SUBNETS: Final[str] = "100.64.0.0/10"  # shared address space (RFC 6598): in no private range, routed nowhere
_REAPER: Final = (sys.executable, "-m", "agentenv_docker.owners")


def _field(text: str) -> str:
    # --mount takes comma-separated fields: a path with a comma or a quote is quoted, CSV style
    if "," not in text and '"' not in text:
        return text
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([text])
    return out.getvalue()


def run_args(
    spec: EnvSpec, options: ContainerOptions, bundle_dir: Path, labels: Mapping[str, str], network: str = "none"
) -> list[str]:
    """The ``docker run`` arguments of one container of ``spec`` (without ``--name`` or ``--rm``)."""
    limits = options.limits
    args = ["run", "-i", "--pull", "never", "--init", "--log-driver", "none", "--network", network]
    args += ["--memory", limits.memory, "--memory-swap", limits.memory, "--pids-limit", str(limits.pids)]
    args += ["--cpus", f"{limits.cpus:g}", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    volume_labels = "".join(f",volume-label={k}={_field(v)}" for k, v in labels.items())
    args += ["--mount", f"type=volume,dst={WORKDIR}{volume_labels}", "-w", WORKDIR, "-e", f"HOME={WORKDIR}"]
    if options.read_only:
        args += ["--read-only", "--tmpfs", "/tmp"]
    for source, target in options.mounts.items():
        src = _field(f"src={(bundle_dir / source).resolve()}")
        args += ["--mount", f"type=bind,{src},{_field(f'dst={target}')},readonly"]
    for key, value in options.env.items():
        args += ["-e", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    for name in spec.pass_env:  # the value from the docker CLI's environment: this process's
        args += ["-e", name]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    return [*args, options.image, *(spec.command or [])]


class ContainerEnv(SubprocessEnv):
    """One episode's container (see the module docstring); created undeployed, started at its first request."""

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        super().__init__(spec, bundle_dir)
        self.options = options_of(spec)
        self.container = f"agentenv-{uuid.uuid4().hex[:16]}"
        self.network: str | None = None
        self.stopped: str | None = None  # why the container is gone for the rest of the episode (a limit it hit)

    def _labels(self) -> dict[str, str]:
        return {**owners.owner_labels(), "agentenv.env": self.spec.name, "agentenv.container": self.container}

    async def spawn(self) -> procs.Child:
        """Start the container, its docker CLI an owned process; its owner's reaper removes it if the owner dies."""
        procs.at_owner_exit(_REAPER)
        labels = self._labels()
        if self.options.network == "episode":
            self.network = await _episode_network(self.container, labels)
        args = run_args(self.spec, self.options, self.bundle_dir, labels, self.network or "none")
        argv = [engine.client(), *args[:1], "--name", self.container, *args[1:]]
        return await procs.spawn(argv, cwd=self.bundle_dir, env=os.environ)

    async def tools(self) -> Any:
        """Ask the program for its tools."""
        try:
            return await super().tools()
        except EnvCrashed as crash:
            raise await self._explain("tools", crash) from None

    async def deploy(self) -> None:
        """Send the env's config; the program brings itself up."""
        try:
            await super().deploy()
        except EnvCrashed as crash:
            raise await self._explain("deploy", crash) from None

    async def call(self, name: str, args: Mapping[str, Any]) -> Any:
        """Run a tool in the container; a call that took it past its memory limit is the policy's mistake."""
        if self.stopped is not None:
            raise ToolError(self.stopped)
        try:
            return await super().call(name, args)
        except EnvCrashed as crash:
            raise await self._explain("call", crash) from None

    async def teardown(self) -> None:
        """Stop the program, then remove the container, its workdir volume and its network."""
        try:
            await super().teardown()
        finally:
            if self.child is not None:
                await engine.arun(["rm", "-f", "-v", self.container], timeout=60)
            if self.network is not None:
                await engine.arun(["network", "rm", self.network], timeout=60)

    async def _explain(self, op: str, crash: EnvCrashed) -> Exception:
        """What the container's exit means, from the engine's record of it."""
        what = f"container env {self.spec.name!r} (image {self.options.image!r})"
        state = await engine.arun(["container", "inspect", "--format", "{{.State.OOMKilled}}", self.container])
        if not state.ok and engine.unreachable(state.err):
            return EnvCrashed(
                f"the Docker engine stopped answering during {op!r} of {what}: {crash}. {engine.how_to_start()}"
            )
        if not state.ok and "no such image" in str(crash).lower():
            return EnvCrashed(f"{what}: the image is not on the engine; build it (agentenv image build BUNDLE)")
        if state.ok and state.out.strip() == "true":
            limit = self.options.limits.memory
            if op != "call":
                return EnvCrashed(f"{what} went past its memory limit ({limit}) during {op!r}; raise limits.memory")
            self.stopped = (
                f"this call took {what} past its memory limit ({limit}): the container was stopped, and the env "
                "is gone for the rest of this episode"
            )
            return ToolError(self.stopped)
        return EnvCrashed(f"{what}: {crash}")


async def _episode_network(name: str, labels: Mapping[str, str]) -> str:
    """A network of its own for one episode, on a subnet of ``$AGENTENV_DOCKER_SUBNETS`` that no other network has."""
    pools = [ipaddress.ip_network(p.strip()) for p in os.environ.get(SUBNETS_VAR, _SUBNETS).split(",") if p.strip()]
    label_args = [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")]
    last = ""
    for _ in range(20):  # a subnet another network holds is refused: draw again
        pool = random.choice(pools)
        prefix = max(pool.prefixlen, 28)
        offset = random.randrange(2 ** (prefix - pool.prefixlen)) * 2 ** (pool.max_prefixlen - prefix)
        subnet = ipaddress.ip_network((int(pool.network_address) + offset, prefix))
        done = await engine.arun(["network", "create", "--internal", "--subnet", str(subnet), *label_args, name])
        if done.ok:
            return name
        last = done.err.strip()
        if "overlap" not in last.lower():
            break
    raise EnvCrashed(f"could not make a network for the episode: {last}; set {SUBNETS_VAR} to a free range")
