"""Built-in env kinds: ``python`` (an in-process class) and ``subprocess`` (a JSON-lines program).

The subprocess protocol: agentenv writes one JSON request per line to the program's stdin and
reads one JSON answer per line from its stdout::

    -> {"id": 1, "op": "tools"}
    <- {"id": 1, "ok": true, "result": [{"name": ..., "description": ..., "parameters": {...}}]}
    -> {"id": 2, "op": "deploy", "config": {...}}
    <- {"id": 2, "ok": true}
    -> {"id": 3, "op": "setup", "task": {"id": "q-1", "split": "train", "metadata": {...}}}   (with setup: true)
    <- {"id": 3, "ok": true}
    -> {"id": 4, "op": "call", "name": "add", "args": {"a": 1, "b": 2}}
    <- {"id": 4, "ok": true, "result": 3}
    <- {"id": 4, "ok": false, "error": "b is required"}               (the policy's mistake)
    <- {"id": 4, "ok": false, "error": "db gone", "crashed": true}    (the env broke)
    -> {"id": 5, "op": "teardown"}
    <- {"id": 5, "ok": true}, then the program exits

The program exits when its stdin closes (agentenv lists the tools of a subprocess env that way when a
bundle loads, without deploying it). stderr is kept (the last lines are shown when the program dies).
The program runs in the sandbox in force (``agentenv.sandbox``): in the bundle folder, of which it sees only the
files its command names and those its ``sandbox.files`` lists, with a private ``HOME`` and ``TMPDIR``, no network
unless ``sandbox.network: host``, and its ``sandbox`` limits; from an allowlisted environment (``PATH``, ``LANG``,
its ``env:`` and the variables its ``pass_env:`` names: ``agentenv.sandbox.environ``). It is killed with its
children at teardown, and when the process that started it dies (``agentenv.sandbox.procs``). Its exit ends the
episode at once as a crash, with its exit code and the end of its stderr; an exit a limit caused (its memory,
processes, CPU time, file size) is the policy's mistake: the call answers with the limit, and the next call starts
the program again (deployed anew).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentenv.env import Env, Tool
from agentenv.errors import EnvCrashed, ToolError
from agentenv.plugins.records import EnvKind, Problem
from agentenv.plugins.targets import resolve
from agentenv.sandbox import procs
from agentenv.sandbox.environ import program_environ
from agentenv.sandbox.spawn import Sandboxed, python_paths
from agentenv.sandbox.spawn import spawn as sandboxed
from agentenv.sandboxing import Program
from agentenv.specs import EnvSpec

__all__ = ["SubprocessEnv", "list_tools"]


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
    if spec.pass_env:
        problems.append(
            Problem(("pass_env",), "a python env runs in the server process, with its environment; remove pass_env")
        )
    if "sandbox" in spec.model_fields_set:
        problems.append(
            Problem(
                ("sandbox",),
                "a python env runs in the server process, unsandboxed (a bundle is trusted code); remove sandbox, "
                "or make it a subprocess env",
            )
        )
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

    The program is an owned process (``agentenv.sandbox.procs``): its own process group, killed with its children
    at teardown and when this process dies; its exit is watched directly, so a crash is seen at once even
    while a child of it holds its pipes.
    """

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        self.spec = spec
        self.bundle_dir = bundle_dir
        self.child: procs.Child | None = None
        self.box: Sandboxed | None = None  # its sandbox, when core started it (a subclass may start it another way)
        self.scratch: Path | None = None  # its HOME and TMPDIR, removed at teardown
        self._next_id = 0
        self._lock = asyncio.Lock()
        self._deployed = False

    async def spawn(self) -> procs.Child:
        """Start the program (once per env, at its first request) in the sandbox in force. A subclass may start it
        another way (in a container): whatever speaks the protocol on the ``procs.Child``'s stdin and stdout."""
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix=f"agentenv-{self.spec.name}-"))
        self.box = await sandboxed(program_of(self.spec, self.bundle_dir, self.scratch))
        return self.box.child

    async def _start(self) -> procs.Child:
        if self.child is None:
            self.child = await self.spawn()
            if self._deployed:  # started again after a limit killed it: deployed anew
                self._deployed = False
                await self._send(self.child, "deploy", {"config": self.spec.config})
                self._deployed = True
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
            try:
                answer = await self._send(child, op, fields)
            except EnvCrashed:
                breach = self.box.breach() if self.box is not None and child is self.child else None
                if breach is None or op != "call":
                    raise
                await self._restart()
                raise ToolError(f"the env program was killed at its {breach}; the next call starts it again") from None
            if op == "deploy":
                self._deployed = True
            return answer

    async def _restart(self) -> None:
        """Forget the program a limit killed (the next request starts it again, deployed anew)."""
        if self.box is not None:
            await self.box.end()
        self.child, self.box = None, None

    async def _send(self, child: procs.Child, op: str, fields: Mapping[str, Any]) -> Any:
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
            if op in ("call", "tools") and "result" not in answer:  # else an empty answer, silently
                raise EnvCrashed(
                    f"env program {self.spec.command!r} answered {op!r} with ok and no 'result': {line[:200]!r}; "
                    f'answer {{"id": {rid}, "ok": true, "result": ...}} (null for nothing)'
                )
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

    async def setup(self, task: Any) -> None:
        """With ``setup: true`` in bundle.yaml, send the task (its id, split and metadata) for the program to set up."""
        if self.spec.options.get("setup") is True:
            await self._request("setup", task={"id": task.id, "split": task.split, "metadata": task.metadata})

    def alive(self) -> bool:
        """False once the program has exited."""
        return self.child is None or not self.child.exited.done()

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
        if self.box is not None:
            await asyncio.to_thread(self.box.prepared.cleanup)
        if self.scratch is not None:
            await asyncio.to_thread(shutil.rmtree, self.scratch, True)


def _environ(spec: EnvSpec, scratch: Path) -> dict[str, str]:
    """The program's allowlisted environment (``agentenv.sandbox.environ``): HOME and TMPDIR in ``scratch``."""
    return program_environ(scratch, scratch, env=spec.options.get("env"), pass_env=spec.pass_env)


def program_of(spec: EnvSpec, bundle_dir: Path, scratch: Path) -> Program:
    """The sandbox's view of a subprocess env's program: the bundle files its command names (not the folder: an
    argument "." would show every task and verifier) and its ``sandbox.files`` lists (read-only), its interpreter's
    packages when it is ``python``, ``scratch`` as its private HOME and TMPDIR."""
    argv = _argv(spec)
    root = bundle_dir.resolve()
    named = [root / a for a in (spec.command or [])[1:] if not os.path.isabs(a) and (root / a).resolve() != root]
    listed = [root / f for f in spec.sandbox.files]
    readable = [p.resolve() for p in (*named, *listed) if p.resolve().is_relative_to(root) and p.exists()]
    if argv and argv[0] == sys.executable:
        readable += python_paths()
    return Program(
        tuple(argv),
        _environ(spec, scratch),
        root,  # resolved: a bundle given as a relative path is no path inside the sandbox
        private=(scratch,),
        writable=writable_paths(spec.sandbox.write, spec.pass_env, root),
        readable=tuple(dict.fromkeys(readable)),
        network=spec.sandbox.network,
        limits=spec.sandbox.limits(),
        name=spec.name,
    )


def writable_paths(write: list[str], pass_env: list[str], root: Path) -> tuple[Path, ...]:
    """The host paths a ``sandbox.write`` list names (``$NAME`` from a passed variable; a missing file made empty).
    A variable that is not set, or not passed, names nothing."""
    found = []
    for entry in write:
        if entry.startswith("$"):
            name, _, rest = entry[1:].partition("/")
            value = os.environ.get(name) if name in pass_env else None
            if not value:
                continue
            entry = os.path.join(value, rest) if rest else value
        path = (root / entry).resolve()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        found.append(path)
    return tuple(found)


def _subprocess_check(spec: EnvSpec, bundle_dir: Path) -> list[Problem]:
    problems = [
        Problem((k,), "unknown field; a subprocess env takes command, config, roles, env, pass_env, sandbox, setup")
        for k in sorted(set(spec.options) - {"env", "setup"})
    ]
    if not isinstance(spec.options.get("setup", False), bool):
        problems.append(Problem(("setup",), "give true (the program takes the setup request) or false"))
    root = bundle_dir.resolve()
    for i, name in enumerate(spec.sandbox.files):
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.exists():
            problems.append(Problem(("sandbox", "files", i), f"{name!r} is no file or folder of the bundle"))
    if not spec.command or not all(isinstance(c, str) for c in spec.command):
        problems.append(
            Problem(("command",), "missing 'command'; give the program as a list (command: [python, env.py])")
        )
    if spec.target is not None:
        problems.append(
            Problem(("target",), "'target' is for python envs; a subprocess env gives its program in 'command'")
        )
    return problems


def _argv(spec: EnvSpec) -> list[str]:
    command = list(spec.command or [])
    if command and command[0] in {"python", "python3"}:
        command[0] = sys.executable  # the interpreter agentenv runs on, with its packages
    return command


def _subprocess_describe(spec: EnvSpec, bundle_dir: Path) -> list[Tool] | None:
    """Start the program once and ask for its tools, so access changes can be checked at load."""
    with tempfile.TemporaryDirectory(prefix=f"agentenv-{spec.name}-") as scratch:
        return list_tools(_argv(spec), cwd=bundle_dir, env=_environ(spec, Path(scratch)))


def list_tools(
    argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> list[Tool]:
    """Run ``argv``, send it the protocol's ``tools`` request and end its input, and return the tools it answers
    (nothing was deployed, so there is nothing to tear down). ``RuntimeError`` naming the program when it does
    not answer within ``timeout`` seconds."""
    requests = json.dumps({"id": 1, "op": "tools"}) + "\n"
    try:
        done = subprocess.run(argv, cwd=cwd, input=requests, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"could not run {argv!r} to list its tools: {exc}") from None
    for line in done.stdout.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            answer = json.loads(line)
            if isinstance(answer, dict) and answer.get("id") == 1 and answer.get("ok"):
                return [Tool.from_dict(t) for t in answer.get("result") or []]
    raise RuntimeError(
        f"{argv!r} did not answer the 'tools' request (exit code {done.returncode}; stderr: "
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
