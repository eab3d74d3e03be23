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
teardown, and when the process that started it dies (``agentenv.procs``). Its exit ends the episode at
once as a crash, with its exit code and the end of its stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import procs
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

TEARDOWN_SECONDS = 5.0  # the program's own teardown, before its group is killed


class SubprocessEnv:
    """An env run as a separate program speaking JSON lines (see the module docstring).

    The program is an owned process (``agentenv.procs``): its own process group, killed with its children
    at teardown and when this process dies; its exit is watched directly, so a crash is seen at once even
    while a child of it holds its pipes.
    """

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        self.spec = spec
        self.bundle_dir = bundle_dir
        self.child: procs.Child | None = None
        self._next_id = 0
        self._lock = asyncio.Lock()

    async def _start(self) -> procs.Child:
        if self.child is None:
            command = list(self.spec.command or [])
            if command and command[0] in {"python", "python3"}:
                command[0] = sys.executable  # the interpreter agentenv runs on, with its packages
            self.child = await procs.spawn(command, cwd=self.bundle_dir, env=_environ(self.spec))
        return self.child

    async def _died(self, what: str) -> EnvCrashed:
        child = self.child
        assert child is not None
        await asyncio.wait({child.exited}, timeout=1.0)  # its pipes may close a moment before its exit is seen
        tail = await child.stderr_caught_up()
        code = child.returncode
        how = f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        return EnvCrashed(
            f"env program {self.spec.command!r} {what} ({how})" + (f"; its stderr ends with:\n{tail}" if tail else "")
        )

    async def _request(self, op: str, **fields: Any) -> Any:
        async with self._lock:
            child = await self._start()
            self._next_id += 1
            rid = self._next_id
            if child.exited.done():
                raise await self._died(f"had exited before {op!r}")
            try:
                child.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
            except (BrokenPipeError, ConnectionResetError):
                await asyncio.wait({child.exited}, timeout=1.0)
                raise await self._died(f"exited during {op!r}") from None
            reading = asyncio.ensure_future(child.stdout.readline())
            try:
                # the answer, or the program's exit: whichever comes first (not EOF, which a child may delay)
                await asyncio.wait({reading, child.exited}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():  # it exited: an answer written just before may still be on its way
                    await asyncio.wait({reading}, timeout=0.1)
            finally:
                if not reading.done():
                    reading.cancel()
            line = reading.result() if reading.done() and not reading.cancelled() else b""
            if not line:
                raise await self._died(f"exited during {op!r}")
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
        """Ask the program to stop (unless a call is still in it), then kill its group; never waits on pipes."""
        child = self.child
        if child is None:
            return
        began = time.monotonic()
        if not child.exited.done() and not self._lock.locked():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._request("teardown"), TEARDOWN_SECONDS)
        await child.end(grace=max(0.0, TEARDOWN_SECONDS - (time.monotonic() - began)))


def _environ(spec: EnvSpec) -> dict[str, str]:
    return {**os.environ, **{k: str(v) for k, v in (spec.options.get("env") or {}).items()}}


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
            env=_environ(spec),
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
