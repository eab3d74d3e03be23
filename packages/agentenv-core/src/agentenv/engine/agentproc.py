"""Running an agent's ``Launch`` in the sandbox in force: its own HOME and working folder, its own processes.

The process starts from an allowlisted environment (``agentenv.sandbox.environ``): ``PATH``, ``LANG``, its own
``HOME`` and ``TMPDIR``, the variables its spec's ``pass_env`` names, and what its launch sets; nothing else of
this process's environment (a cloud key, a judge's key, the trainer's model client settings) reaches it. In its
sandbox (``agentenv.sandbox``) it writes its working folder and HOME only, reads the system's folders, its own
program's and the bundle files its command names, and reaches no network but its openings: the loopback
endpoints of its model and its MCP server, each relayed on its own (``agentenv.sandbox.relay``); an endpoint on
another machine needs ``sandbox: {network: host}``. Killing a run kills its sandbox (the agent and everything it
started); if this process dies without killing it (SIGKILL), its reaper (``agentenv.sandbox.procs``) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from agentenv.engine.agents import AgentRequest, Launch
from agentenv.errors import AgentEnvError
from agentenv.hosts import is_loopback
from agentenv.sandbox import procs
from agentenv.sandbox.choice import current
from agentenv.sandbox.environ import program_environ
from agentenv.sandbox.relay import RELAY, Relays, relayed_argv
from agentenv.sandbox.spawn import program_paths
from agentenv.sandboxing import Opening, Prepared, Program
from agentenv.specs import SandboxSpec

__all__ = ["AgentDirs", "AgentExit", "AgentProcess", "openings_for"]

_OUTPUT_TAIL = 2000


@dataclass(frozen=True)
class AgentDirs:
    """An agent's folders within one episode: ``work`` (its working folder), ``home`` (its HOME), ``tmp`` (its
    TMPDIR), ``logs``."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def create(self) -> AgentDirs:
        for path in (self.work, self.home, self.tmp, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class AgentExit:
    """How a run ended: the exit ``code`` (negative: killed by that signal), the ``reply`` read from it, the
    tail of what it printed (``output``, for messages), its wall-clock ``seconds``, and the limit of its sandbox it
    hit (``breach``: the policy's doing), if it did."""

    code: int
    reply: str
    output: str
    seconds: float
    breach: str | None = None


def openings_for(request: AgentRequest) -> tuple[Opening, ...]:
    """The loopback endpoints an agent's sandbox opens, each bound to the key it was given: its model endpoint's
    and its MCP server's.
    ``AgentEnvError`` naming the fix when one is on another machine and its ``sandbox.network`` is ``none``."""
    urls = [(request.endpoint.base_url, request.endpoint.api_key)]
    if request.mcp is not None:
        urls.append((request.mcp.url, request.mcp.token))
    found = []
    for url, key in urls:
        parts = urlparse(url)
        if not is_loopback(parts.hostname or ""):
            if request.spec.sandbox.network == "none":
                raise AgentEnvError(
                    f"agent {request.spec.name!r}: {url} is not on this machine and its sandbox has no network; "
                    f"give it one on purpose (agents.{request.spec.name}.sandbox: {{network: host}})"
                )
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        found.append(Opening(port, parts.hostname or "127.0.0.1", key))
    unique: dict[int, Opening] = {}
    for opening in found:
        unique.setdefault(opening.port, opening)  # one relay per port: the first opening's key
    return tuple(unique.values())


class AgentProcess:
    """One run of an agent as a local process; ``await run()`` starts it and waits for it.

    The process is the leader of its own process group. Cancelling ``run()`` kills the group and waits for
    the process before the cancellation goes on; so does ``kill()``, and a run that ended kills what its
    agent left running.
    """

    def __init__(
        self,
        launch: Launch,
        dirs: AgentDirs,
        *,
        name: str = "agent",
        pass_env: Iterable[str] = (),
        sandbox: SandboxSpec | None = None,
        openings: tuple[Opening, ...] = (),
        bundle_dir: Path | None = None,
    ) -> None:
        self.launch = launch
        self.bundle_dir = bundle_dir.resolve() if bundle_dir is not None else None
        self.dirs = dirs
        self.name = name
        self.pass_env = tuple(pass_env)
        self.sandbox = sandbox or SandboxSpec()
        self.openings = openings
        self.pid: int | None = None
        self._proc: asyncio.subprocess.Process | None = None

    def _program(self, env: dict[str, str], relays: Relays | None) -> Program:
        argv = relayed_argv(self.launch.argv, relays) if relays is not None else self.launch.argv
        readable = [*program_paths(self.launch.argv, env.get("PATH", "")), *([RELAY] if relays else [])]
        readable += [p for p in self._named() if p.exists()]
        return Program(
            tuple(argv),
            env,
            self.dirs.work,
            private=(self.dirs.tmp,),
            writable=(self.dirs.work, self.dirs.home),
            readable=tuple(dict.fromkeys([*readable, *([relays.folder] if relays else [])])),
            network=self.sandbox.network,
            openings=self.openings,
            limits=self.sandbox.limits(),
            name=self.name,
        )

    def _named(self) -> list[Path]:
        """The host paths it may read besides its program: the absolute ones its command names and its spec's
        ``sandbox.files`` (relative to the bundle folder); never the bundle folder itself or a folder above it
        (``{bundle}`` as an argument would show the policy every task, verifier and answer key)."""
        named = [Path(a).resolve() for a in self.launch.argv[1:] if os.path.isabs(a)]
        if self.bundle_dir is not None:
            named += [(self.bundle_dir / f).resolve() for f in self.sandbox.files]
            named = [p for p in named if not self.bundle_dir.is_relative_to(p)]
        else:
            named = [p for p in named if p.is_file()]  # a folder could hold the bundle: only files without one
        return named

    async def run(self) -> AgentExit:
        """Start the agent, wait for it to exit, read its reply. ``OSError`` when it cannot be started."""
        self.dirs.create()
        for relative, text in self.launch.files.items():
            path = Path(relative) if os.path.isabs(relative) else self.dirs.home / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        stamp = f"{self.name}-{time.monotonic_ns()}"
        out_path, err_path = self.dirs.logs / f"{stamp}.out", self.dirs.logs / f"{stamp}.err"
        env = program_environ(self.dirs.home, self.dirs.tmp, env=self.launch.env, pass_env=self.pass_env)
        env["PWD"] = str(self.dirs.work)
        # this process's owner tags: the agent and what it starts die with this process however it exits, a
        # SIGKILL included, when no kill() of ours can run
        env = procs.owned_environ(env)
        if not self.launch.argv or shutil.which(self.launch.argv[0], path=env.get("PATH")) is None:
            # said here, as an exec would: inside a sandbox it would be the sandbox's exit, not a start refused
            program = self.launch.argv[0] if self.launch.argv else ""
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", program)
        relays = None
        if self.openings and self.sandbox.network == "none":
            relays = Relays(self.openings, self.dirs.root / "relay")
            await relays.start()
        started = time.monotonic()
        prepared: Prepared | None = None
        try:
            prepared = current(getattr(self.sandbox, "backend", None)).prepare(self._program(env, relays))
            code = await self._run(prepared, out_path, err_path)
            breach = prepared.breach(code)  # before its cleanup: the cgroup's counters go with it
        finally:
            if prepared is not None:
                await asyncio.to_thread(prepared.cleanup)
            if relays is not None:
                await relays.close()
        stdout = out_path.read_text(encoding="utf-8", errors="replace")
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
        text = stdout
        if self.launch.reply_file is not None:
            reply_path = self.dirs.work / self.launch.reply_file
            text = reply_path.read_text(encoding="utf-8", errors="replace") if reply_path.is_file() else ""
        reply = self.launch.parse_reply(text) if self.launch.parse_reply else text.strip()
        output = (stderr[-_OUTPUT_TAIL:] + ("\n" if stderr else "") + stdout[-_OUTPUT_TAIL:]).strip()
        return AgentExit(code, reply, output, time.monotonic() - started, breach)

    async def _run(self, prepared: Prepared, out_path: Path, err_path: Path) -> int:
        # files, not pipes: an agent that prints a lot never blocks on a full pipe while nobody reads it
        with out_path.open("wb") as out, err_path.open("wb") as err:
            self._proc = await asyncio.create_subprocess_exec(
                *prepared.argv,
                cwd=prepared.cwd,
                env=prepared.env,
                stdin=asyncio.subprocess.PIPE if self.launch.stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        try:
            if self.launch.stdin is not None:
                assert self._proc.stdin is not None
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._proc.stdin.write(self.launch.stdin.encode())
                    await self._proc.stdin.drain()
                    self._proc.stdin.close()
            code = await self._proc.wait()
        except BaseException:
            await asyncio.shield(self.kill())
            raise
        await self.kill()  # what the agent left running (a shell it started, a language server)
        return code

    async def kill(self) -> None:
        """Kill the agent's process group (SIGKILL) and wait for the agent; a no-op once it is gone."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            await proc.wait()
