"""Built-in env kinds: ``python`` (an in-process class) and ``subprocess`` (a JSON-lines program).

The subprocess protocol: agentenv writes one JSON request per line to the program's stdin and
reads one JSON answer per line from its stdout::

    -> {"id": 1, "op": "tools"}
    <- {"id": 1, "ok": true, "result": [{"name": ..., "description": ..., "parameters": {...}}]}
    -> {"id": 2, "op": "deploy", "config": {...}}
    <- {"id": 2, "ok": true}
    -> {"id": 3, "op": "call", "name": "add", "args": {"a": 1, "b": 2}}
    <- {"id": 3, "ok": true, "result": 3}
    <- {"id": 3, "ok": false, "error": "b is required"}               (the policy's mistake)
    <- {"id": 3, "ok": false, "error": "db gone", "crashed": true}    (the env broke)
    -> {"id": 4, "op": "teardown"}
    <- {"id": 4, "ok": true}, then the program exits

The program exits when its stdin closes (agentenv lists the tools of a subprocess env that way when a
bundle loads, without deploying it). stderr is kept (the last lines are shown when the program dies).
The program runs in the bundle folder, in its own process group, and is killed with its children at
teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .env import Env, Tool
from .errors import EnvCrashed, ToolError
from .records import EnvKind, Problem
from .specs import EnvSpec
from .targets import resolve

__all__ = ["SubprocessEnv"]


# --- python ----------------------------------------------------------------------------------


_classes: dict[tuple[str, str], type] = {}


def _python_class(spec: EnvSpec, bundle_dir: Path) -> type:
    # resolved once per (target, bundle): episodes create their env on the hot path of a reset
    key = (spec.target or "", str(bundle_dir))
    if key not in _classes:
        _classes[key] = _resolve_class(spec, bundle_dir)
    return _classes[key]


def _resolve_class(spec: EnvSpec, bundle_dir: Path) -> type:
    if not spec.target:
        raise LookupError("missing 'target'; name the env class as module:Class")
    cls = resolve(spec.target, bundle_dir=bundle_dir, what="target")
    if not inspect.isclass(cls):
        raise LookupError(f"target {spec.target!r} is not a class")
    return cls


def _python_check(spec: EnvSpec, bundle_dir: Path) -> list[Problem]:
    problems = [Problem((k,), "unknown field; a python env takes target, config, roles") for k in sorted(spec.options)]
    if spec.command is not None:
        problems.append(
            Problem(("command",), "'command' is for subprocess envs; a python env names its class in 'target'")
        )
    try:
        _python_class(spec, bundle_dir)
    except Exception as exc:  # an import error in the env's module is a bundle problem, said as such
        message = (
            str(exc)
            if isinstance(exc, LookupError)
            else f"importing {spec.target!r} failed: {type(exc).__name__}: {exc}"
        )
        problems.append(Problem(("target",), message))
    return problems


def _python_describe(spec: EnvSpec, bundle_dir: Path) -> list[Tool] | None:
    cls = _python_class(spec, bundle_dir)
    if issubclass(cls, Env) and cls.tools is Env.tools:
        return cls.declared_tools()
    instance = cls(spec.config, bundle_dir)
    tools = instance.tools()
    if inspect.isawaitable(tools):
        # an async tools() can't be listed at load time; the first episode tells
        with contextlib.suppress(Exception):
            tools.close()  # type: ignore[union-attr]
        return None
    return [t if isinstance(t, Tool) else Tool.from_dict(t) for t in tools]


def _python_create(spec: EnvSpec, bundle_dir: Path) -> Any:
    """An ``agentenv.Env`` subclass in this process: ``target: module:Class`` (imported from the bundle folder)."""
    return _python_class(spec, bundle_dir)(spec.config, bundle_dir)


# --- subprocess ------------------------------------------------------------------------------

STDERR_KEPT = 40
LINE_LIMIT = 64 * 1024 * 1024


class SubprocessEnv:
    """An env run as a separate program speaking JSON lines (see the module docstring)."""

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        self.spec = spec
        self.bundle_dir = bundle_dir
        self.proc: asyncio.subprocess.Process | None = None
        self._next_id = 0
        self._lock = asyncio.Lock()
        self._stderr: deque[str] = deque(maxlen=STDERR_KEPT)
        self._stderr_task: asyncio.Task[None] | None = None

    async def _start(self) -> asyncio.subprocess.Process:
        if self.proc is None:
            command = list(self.spec.command or [])
            if command and command[0] in {"python", "python3"}:
                command[0] = sys.executable  # the interpreter agentenv runs on, with its packages
            self.proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=self.bundle_dir,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **{k: str(v) for k, v in (self.spec.options.get("env") or {}).items()}},
                start_new_session=True,  # its own process group: teardown kills its children too
                limit=LINE_LIMIT,
            )
            self._stderr_task = asyncio.create_task(self._drain_stderr(self.proc))
        return self.proc

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            self._stderr.append(raw.decode(errors="replace").rstrip())

    async def _stderr_caught_up(self) -> None:
        """Let the stderr reader read to the end (the program exited), so its last lines are in the message.

        wait() may return without yielding to the loop; a child that still holds stderr open is not waited for.
        """
        if self._stderr_task is not None:
            with contextlib.suppress(Exception):  # a timeout, or the reader's own error: the tail is what it is
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 0.5)

    def _died(self, what: str) -> EnvCrashed:
        code = self.proc.returncode if self.proc else None
        tail = "\n".join(self._stderr)
        return EnvCrashed(
            f"env program {self.spec.command!r} {what} (exit code {code})"
            + (f"; its stderr ends with:\n{tail}" if tail else "")
        )

    async def _request(self, op: str, **fields: Any) -> Any:
        async with self._lock:
            proc = await self._start()
            assert proc.stdin is not None and proc.stdout is not None
            self._next_id += 1
            rid = self._next_id
            try:
                proc.stdin.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
                await proc.stdin.drain()
                line = await proc.stdout.readline()
            except (BrokenPipeError, ConnectionResetError):
                await proc.wait()
                await self._stderr_caught_up()
                raise self._died(f"exited during {op!r}") from None
            if not line:
                await proc.wait()
                await self._stderr_caught_up()
                raise self._died(f"exited during {op!r}")
            try:
                answer = json.loads(line)
            except json.JSONDecodeError:
                raise EnvCrashed(
                    f"env program {self.spec.command!r} wrote {line[:200]!r}, which is not a JSON "
                    "answer; write only answers to stdout and logs to stderr"
                ) from None
            if not isinstance(answer, dict) or answer.get("id") != rid:
                raise EnvCrashed(f"env program {self.spec.command!r} answered {answer!r} to request {rid}")
            if answer.get("ok"):
                return answer.get("result")
            message = str(answer.get("error", "failed"))
            if answer.get("crashed") or op != "call":
                raise EnvCrashed(message)
            raise ToolError(message)

    async def tools(self) -> list[Tool]:
        """Ask the program for its tools."""
        return [Tool.from_dict(t) for t in await self._request("tools") or []]

    async def deploy(self) -> None:
        """Send the env's config; the program brings itself up."""
        await self._request("deploy", config=self.spec.config)

    async def call(self, name: str, args: Mapping[str, Any]) -> Any:
        """Run a tool in the program."""
        return await self._request("call", name=name, args=dict(args))

    async def teardown(self) -> None:
        """Ask the program to stop, then make sure it and its children are gone."""
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._request("teardown"), 5.0)
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except TimeoutError:
                pass
        _kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(BaseException):
                await self._stderr_task


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _subprocess_check(spec: EnvSpec, bundle_dir: Path) -> list[Problem]:
    problems = [
        Problem((k,), "unknown field; a subprocess env takes command, config, roles, env")
        for k in sorted(set(spec.options) - {"env"})
    ]
    if not spec.command or not all(isinstance(c, str) for c in spec.command):
        problems.append(
            Problem(("command",), "missing 'command'; give the program as a list (command: [python, env.py])")
        )
    if spec.target is not None:
        problems.append(
            Problem(("target",), "'target' is for python envs; a subprocess env gives its program in 'command'")
        )
    return problems


def _subprocess_describe(spec: EnvSpec, bundle_dir: Path) -> list[Tool] | None:
    """Start the program once and ask for its tools, so access changes can be checked at load."""
    command = list(spec.command or [])
    if command and command[0] in {"python", "python3"}:
        command[0] = sys.executable
    # only "tools", then end of input: nothing was deployed, so there is nothing to tear down
    requests = json.dumps({"id": 1, "op": "tools"}) + "\n"
    try:
        done = subprocess.run(
            command,
            cwd=bundle_dir,
            input=requests,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, **{k: str(v) for k, v in (spec.options.get("env") or {}).items()}},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"could not run {command!r} to list its tools: {exc}") from None
    for line in done.stdout.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            answer = json.loads(line)
            if isinstance(answer, dict) and answer.get("id") == 1 and answer.get("ok"):
                return [Tool.from_dict(t) for t in answer.get("result") or []]
    raise RuntimeError(
        f"{command!r} did not answer the 'tools' request (exit code {done.returncode}; stderr: "
        f"{done.stderr.strip()[-300:]!r})"
    )


def _subprocess_create(spec: EnvSpec, bundle_dir: Path) -> Any:
    """A program speaking JSON lines on stdin/stdout: ``command: [python, env.py]``, run in the bundle folder in
    its own process group (``env``: extra environment variables)."""
    return SubprocessEnv(spec, bundle_dir)


ENV_KINDS = (
    EnvKind("python", _python_create, _python_describe, _python_check),
    EnvKind("subprocess", _subprocess_create, _subprocess_describe, _subprocess_check),
)
