"""Running an agent's ``Launch`` as a local process: its own HOME and working folder, its own process group.

The process starts from a clean copy of this process's environment: variables that point a model client
somewhere (``OPENAI_*``, ``ANTHROPIC_*``, ...) and the XDG folders are dropped, so an agent reaches only the
endpoint its launch names and keeps its state under its own HOME. This process's environment is never
changed. Killing a run kills its whole process group (the agent and everything it started); if this process
dies without killing it (SIGKILL), its reaper (``agentenv.procs``) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import procs
from .agents import Launch

__all__ = ["AgentDirs", "AgentExit", "AgentProcess", "clean_environment"]

# variables a model client or an agent CLI reads: an agent must see only what its launch sets
_DROPPED = re.compile(
    r"^(OPENAI|ANTHROPIC|CLAUDE|CLAUDE_CODE|CODEX|OPENCODE|MSWEA|LITELLM|GEMINI|GOOGLE_API|AZURE_OPENAI|MISTRAL|"
    r"GROQ|TOGETHER|DEEPSEEK|OPENROUTER|AGENTENV|XDG)_"
)
_OUTPUT_TAIL = 2000


def clean_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default: this process's environment) without model-client variables and XDG folders."""
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if not _DROPPED.match(k) and k not in {"HF_TOKEN", "HUGGINGFACE_TOKEN"}}


@dataclass(frozen=True)
class AgentDirs:
    """An agent's folders within one episode: ``work`` (its working folder), ``home`` (its HOME), ``logs``."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def create(self) -> AgentDirs:
        for path in (self.work, self.home, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class AgentExit:
    """How a run ended: the exit ``code`` (negative: killed by that signal), the ``reply`` read from it, the
    tail of what it printed (``output``, for messages), and its wall-clock ``seconds``."""

    code: int
    reply: str
    output: str
    seconds: float


class AgentProcess:
    """One run of an agent as a local process; ``await run()`` starts it and waits for it.

    The process is the leader of its own process group. Cancelling ``run()`` kills the group and waits for
    the process before the cancellation goes on; so does ``kill()``, and a run that ended kills what its
    agent left running.
    """

    def __init__(self, launch: Launch, dirs: AgentDirs, *, name: str = "agent") -> None:
        self.launch = launch
        self.dirs = dirs
        self.name = name
        self.pid: int | None = None
        self._proc: asyncio.subprocess.Process | None = None

    async def run(self) -> AgentExit:
        """Start the agent, wait for it to exit, read its reply. ``OSError`` when it cannot be started."""
        self.dirs.create()
        for relative, text in self.launch.files.items():
            path = Path(relative) if os.path.isabs(relative) else self.dirs.home / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        stamp = f"{self.name}-{time.monotonic_ns()}"
        out_path, err_path = self.dirs.logs / f"{stamp}.out", self.dirs.logs / f"{stamp}.err"
        env = {**clean_environment(), "HOME": str(self.dirs.home), "PWD": str(self.dirs.work), **self.launch.env}
        # this process's owner tags (clean_environment dropped them): the agent and what it starts die with this
        # process however it exits, a SIGKILL included, when no kill() of ours can run
        env[procs.OWNERS_VAR] = procs.owned_environ()[procs.OWNERS_VAR]
        started = time.monotonic()
        # files, not pipes: an agent that prints a lot never blocks on a full pipe while nobody reads it
        with out_path.open("wb") as out, err_path.open("wb") as err:
            self._proc = await asyncio.create_subprocess_exec(
                *self.launch.argv,
                cwd=self.dirs.work,
                env=env,
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
        stdout = out_path.read_text(encoding="utf-8", errors="replace")
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
        text = stdout
        if self.launch.reply_file is not None:
            reply_path = self.dirs.work / self.launch.reply_file
            text = reply_path.read_text(encoding="utf-8", errors="replace") if reply_path.is_file() else ""
        reply = self.launch.parse_reply(text) if self.launch.parse_reply else text.strip()
        output = (stderr[-_OUTPUT_TAIL:] + ("\n" if stderr else "") + stdout[-_OUTPUT_TAIL:]).strip()
        return AgentExit(code, reply, output, time.monotonic() - started)

    async def kill(self) -> None:
        """Kill the agent's process group (SIGKILL) and wait for the agent; a no-op once it is gone."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            await proc.wait()
