"""The ``bash`` env kind: one tool, ``bash``, that runs a command in the episode's sandbox.

A task offers it with ``toolset: {bash: true}``: the episode then deploys the bundle's env named ``bash`` (a
``kind: bash`` env, to set its ``pass_env`` and its ``sandbox``: network and limits) or, where the bundle has
none, a default one. Each episode gets one sandbox (``agentenv.sandbox``), started at deploy and gone at teardown,
with a shell in it (``agentenv/sandbox/_shell.py``) that runs each command as ``bash -c`` in the episode's
private workdir: what a call writes is there for the next, and a call costs a fork, not a new sandbox. The answer
is the command's output (stdout and stderr together, the first ``output_chars`` characters) and its exit code;
a command past a limit (its wall time, memory, processes, CPU time, file size) is killed and its answer says
which: the policy's mistake, scored. A sandbox that cannot start is the env's failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentenv.env import Tool
from agentenv.errors import EnvCrashed
from agentenv.plugins.records import EnvKind, Problem
from agentenv.sandbox.environ import program_environ
from agentenv.sandbox.spawn import Sandboxed, spawn
from agentenv.sandboxing import Program, count_hit
from agentenv.specs import BASH_TOOL, EnvSpec

__all__ = ["BASH", "BASH_KIND", "DEFAULT_BASH", "BashEnv", "shell_argv"]

SHELL = Path(__file__).parent.parent / "sandbox" / "_shell.py"  # run by path: stdlib only, no site
BASH = Tool(
    BASH_TOOL,
    "Run a bash command in this episode's scratch folder; returns its output and exit code.",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command."}},
        "required": ["command"],
        "additionalProperties": False,
    },
)
DEFAULT_BASH = EnvSpec(name=BASH_TOOL, kind="bash")


def shell_argv(isolates_processes: bool) -> tuple[str, ...]:
    """The episode's shell: the interpreter agentenv runs on, isolated from its packages (``-I -S``)."""
    flag = ("--pid-namespace",) if isolates_processes else ()
    return (os.path.realpath(sys.executable), "-I", "-S", str(SHELL), *flag)


class BashEnv:
    """The env behind the ``bash`` tool: a sandbox per episode with a shell in it (see the module docstring)."""

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        self.spec = spec
        self.limits = spec.sandbox.limits()
        self.scratch: Path | None = None
        self.box: Sandboxed | None = None
        self._lock = asyncio.Lock()

    def tools(self) -> list[Tool]:
        """The one tool, ``bash``."""
        return [BASH]

    async def deploy(self) -> None:
        """Start the episode's sandbox and its shell."""
        self.scratch = Path(tempfile.mkdtemp(prefix="agentenv-bash-"))
        await self._start()

    async def _start(self) -> None:
        from agentenv.sandbox.choice import current

        assert self.scratch is not None
        work, home, tmp = (self.scratch / part for part in ("work", "home", "tmp"))
        for path in (work, home, tmp):
            path.mkdir(exist_ok=True)
        program = Program(
            shell_argv(current().isolates_processes),
            program_environ(home, tmp, pass_env=self.spec.pass_env),
            work,
            private=(work, home, tmp),
            readable=(SHELL,),
            network=self.spec.sandbox.network,
            limits=self.limits,
            name="bash",
            init=True,  # a command's kill -9 -1 cannot take the episode's shell down with it
        )
        self.box = await spawn(program)

    async def call(self, name: str, args: Mapping[str, Any]) -> str:
        """Run ``args["command"]``; returns its output and ``[exit code N]`` (and the limit it hit, if it did)."""
        assert self.box is not None, "deploy() first"
        async with self._lock:  # one command at a time: the shell answers in order
            answer = await self._ask(str(args["command"]))
            if isinstance(answer, str):  # a limit killed the whole sandbox: the next call gets a new one
                await self.box.end()
                await self._start()
                return f"[killed: {answer} reached; the sandbox was started again, without the files written]"
        text, code, chars = answer["output"], answer["code"], self.limits.output_chars
        if len(text) > chars:
            text = text[:chars] + f"\n[output cut at {chars} characters]"
        breach = self.box.breach(code)
        if answer["timed_out"]:
            count_hit("call time limit")
            text += f"\n[killed: the command ran past its time limit ({self.limits.call_seconds:g} s)]"
            # a limit hit on the way is said too: it is often why the time ran out (a fork bomb's shell waits
            # between forks the process limit refuses)
            text += f"\n[{breach} reached]" if breach is not None else ""
        elif breach is not None:
            text += f"\n[killed: {breach} reached]" if code < 0 or code > 128 else f"\n[{breach} reached]"
        return f"{text}\n[exit code {code}]"

    async def _ask(self, command: str) -> dict[str, Any] | str:
        """The shell's answer to ``command``, or the limit that killed the shell."""
        box = self.box
        assert box is not None
        request = {"command": command, "seconds": self.limits.call_seconds, "keep": 4 * self.limits.output_chars + 4}
        child = box.child
        try:
            child.write((json.dumps(request) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            return await self._ended()
        reading = asyncio.ensure_future(child.stdout.readline())
        try:
            await asyncio.wait({reading, child.exited}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():  # the shell exited: an answer written just before may still be on its way
                await asyncio.wait({reading}, timeout=0.1)
        finally:
            if not reading.done():
                reading.cancel()
        line = reading.result() if reading.done() and not reading.cancelled() else b""
        return json.loads(line) if line else await self._ended()

    async def _ended(self) -> str:
        """The limit that killed the episode's shell (the policy's doing); ``EnvCrashed`` when none did."""
        box = self.box
        assert box is not None
        await asyncio.wait({box.child.exited}, timeout=1.0)
        breach = box.breach()
        if breach is not None:
            return breach
        tail = await box.child.stderr_caught_up()
        ends = f"; its stderr ends with:\n{tail}" if tail else ""
        raise EnvCrashed(f"the bash sandbox ended (exit code {box.child.returncode}){ends}")

    async def teardown(self) -> None:
        """End the sandbox (with everything in it) and remove the scratch folder."""
        if self.box is not None:
            await self.box.end()
            self.box = None
        if self.scratch is not None:
            await asyncio.to_thread(shutil.rmtree, self.scratch, True)
            self.scratch = None


def _check(spec: EnvSpec, bundle_dir: Path) -> list[Problem]:
    problems = [Problem((k,), "unknown field; a bash env takes pass_env and sandbox") for k in sorted(spec.options)]
    for field in ("target", "command"):
        if getattr(spec, field) is not None:
            problems.append(Problem((field,), f"a bash env runs the model's commands: it takes no {field!r}"))
    if spec.config:
        problems.append(Problem(("config",), "a bash env takes no config"))
    if spec.sandbox.files:
        problems.append(Problem(("sandbox", "files"), "a bash env sees no bundle file (the model runs it)"))
    return problems


BASH_KIND = EnvKind("bash", BashEnv, lambda spec, bundle_dir: [BASH], _check)
