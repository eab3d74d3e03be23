"""Processes agentenv starts for episodes (subprocess envs, the bash tool): owned, watched, and killed with all
they start.

**Ownership.** Each runs in a process group of its own and carries this process's tag in its environment
(``$AGENTENV_OWNERS``, a ``:``-separated list its children inherit). Teardown kills the group. If this
process dies, however it dies (SIGKILL included), its **reaper** kills every process carrying its tag: one
small process per owner (``agentenv/sandbox/reaper.py``), started with the first owned process, that holds the
read end of a lifeline pipe and acts when the pipe closes. A torn-down env's tag is swept by the reaper as
well, so a child that left the group (a daemon that called ``setsid``) goes too. What a process signal cannot
end (a container, which its engine runs, not this process) is a command the reaper runs once the owner is gone
(``at_owner_exit``).

Why a reaper rather than ``PR_SET_PDEATHSIG``: the parent-death signal fires when the *thread* that forked
the child exits (not the process), is not inherited by the child's own children, and needs a
``preexec_fn`` (unsafe in a threaded process). The reaper finds every descendant that kept the variable,
whichever group or session it is in, and costs one process per owner, not one per env.

**Watching.** A process's exit is watched through a pidfd on the event loop (no thread; a thread per process
where pidfds do not exist), not through its pipes: a program that dies while a child of it holds its pipes
open is seen dead at once, with its exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentenv.sandbox.pipes import ReadEnd, WriteEnd

__all__ = [
    "FDS_PER_CHILD",
    "OWNERS_VAR",
    "Child",
    "at_owner_exit",
    "kill_all",
    "own_all_children",
    "owned_environ",
    "owner_tag",
    "spawn",
]

OWNERS_VAR = "AGENTENV_OWNERS"
STDERR_KEPT = 40
FDS_PER_CHILD = 4  # what a Child holds open in this process: its stdin, stdout and stderr pipes, and a pidfd

_lock = threading.Lock()
_tag = uuid.uuid4().hex[:16]
_reaper: int | None = None  # its pid
_lifeline: int | None = None  # the write end; this process holds the only copy
_children: weakref.WeakSet[Child] = weakref.WeakSet()
_at_exit: list[tuple[str, ...]] = []  # told to every reaper this process starts (a new one after a restart too)


def owner_tag() -> str:
    """This process's tag (every process it starts for an episode carries it)."""
    return _tag


def owned_environ(base: Mapping[str, str] | None = None, *tags: str) -> dict[str, str]:
    """``base`` (default: this process's environment) with this owner's tag, and ``tags``, in ``$AGENTENV_OWNERS``.

    A Python env that starts programs of its own passes this as their ``env=``: they are then killed with
    the server (or trainer) that runs the env, however it exits (this starts the owner's reaper, if it is not
    running yet, for that).
    """
    _ensure_reaper()
    environ = dict(os.environ if base is None else base)
    have = [t for t in environ.get(OWNERS_VAR, "").split(":") if t]
    environ[OWNERS_VAR] = ":".join(dict.fromkeys([*have, _tag, *tags]))
    return environ


def own_all_children() -> None:
    """Tag this process's own environment, so that every program it starts from now on, by any means (a Python
    env's own subprocesses too), carries its tag and dies with it; and start the reaper.

    For a process that only serves episodes (``agentenv serve``). A trainer serving in process
    (``AgentEnv.local``) does not: its other helpers may be meant to outlive it.
    """
    os.environ[OWNERS_VAR] = owned_environ()[OWNERS_VAR]  # owned_environ starts the reaper


def at_owner_exit(argv: Sequence[str]) -> None:
    """Have this owner's reaper run ``argv`` followed by this owner's tag, once this process is gone (however it
    ends, SIGKILL included) and what it owned is killed: for what no signal ends, such as a container.

    Registered once per process for the life of the process (again is a no-op); a forked child's reaper runs it
    with the child's own tag. The command runs with stdin and stdout closed, at most 60 s, stderr kept.
    """
    entry = tuple(argv)
    with _lock:
        if entry in _at_exit:
            return
        _at_exit.append(entry)
    _ensure_reaper()
    _tell_reaper(entry)


def _tell_reaper(entry: tuple[str, ...]) -> None:
    if _lifeline is not None:
        with contextlib.suppress(OSError):
            os.write(_lifeline, f"at-exit {json.dumps(list(entry))}\n".encode())


def _ensure_reaper() -> None:
    """Start this process's reaper if it is not running (Linux only: it reads /proc)."""
    global _reaper, _lifeline
    if not sys.platform.startswith("linux"):
        return
    with _lock:
        if _reaper is not None and _running(_reaper):
            return
        if _lifeline is not None:
            with contextlib.suppress(OSError):
                os.close(_lifeline)
        read_end, write_end = os.pipe()  # both close-on-exec: no other program inherits the write end
        try:
            # posix_spawn, not Popen: nothing in this process waits for it or warns that it still runs at exit;
            # its own session: a Ctrl-C or a group kill meant for the owner must not take it first
            _reaper = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", str(Path(__file__).with_name("reaper.py")), _tag],
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0), (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
                setsid=True,
            )
        finally:
            os.close(read_end)
        _lifeline = write_end
        for entry in _at_exit:
            _tell_reaper(entry)


def _running(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def _forget_in_child() -> None:
    # a forked child (a trainer's worker) is an owner of its own: it must not hold the parent's lifeline open
    global _reaper, _lifeline, _tag
    if _lifeline is not None:
        with contextlib.suppress(OSError):
            os.close(_lifeline)
    _reaper, _lifeline, _tag = None, None, uuid.uuid4().hex[:16]
    _children.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _sweep(tag: str) -> None:
    """Ask the reaper to kill whatever still carries ``tag`` (it scans /proc off this process's loop)."""
    if _lifeline is None:
        return
    with contextlib.suppress(OSError):
        os.write(_lifeline, f"sweep {tag}\n".encode())


class Child:
    """A program started by ``spawn``: its stdout as a stream, its exit as a future, its stderr's tail."""

    def __init__(self, popen: subprocess.Popen[bytes], tag: str, loop: asyncio.AbstractEventLoop) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.tag = tag
        self.loop = loop
        self.exited: asyncio.Future[int] = loop.create_future()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_KEPT)
        self.stdout = asyncio.StreamReader(limit=64 * 1024 * 1024, loop=loop)
        self._stdin: WriteEnd | None = None
        self._ends: list[ReadEnd | WriteEnd] = []
        self._stderr_done: asyncio.Future[None] = loop.create_future()
        self._partial = b""

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        return self.exited.result() if self.exited.done() else None

    def _attach(self, stdin: int | None, stdout: int, stderr: int | None) -> None:
        """Hand this process's ends of the pipes to their watchers; on any error, every one not handed is closed."""
        left = [fd for fd in (stdin, stdout, stderr) if fd is not None]
        try:
            if stdin is not None:
                left.remove(stdin)
                self._stdin = WriteEnd(stdin, self.loop)
                self._ends.append(self._stdin)
            left.remove(stdout)
            out = ReadEnd(stdout, self.loop, self.stdout.feed_data, self.stdout.feed_eof)
            self.stdout.set_transport(out)  # type: ignore[arg-type]  # pauses it at the reader's limit
            self._ends.append(out)
            if stderr is not None:
                left.remove(stderr)
                self._ends.append(ReadEnd(stderr, self.loop, self._stderr_line, self._stderr_ended))
            else:
                self._stderr_done.set_result(None)
            self._watch()
        except BaseException:
            for fd in left:
                os.close(fd)
            self.close_pipes()
            raise

    def _stderr_line(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        self.stderr_tail.extend(line.decode(errors="replace").rstrip() for line in lines)
        if len(self._partial) > 65536:  # a line without end: keep its start
            self.stderr_tail.append(self._partial[:65536].decode(errors="replace"))
            self._partial = b""

    def _stderr_ended(self) -> None:
        if self._partial:
            self.stderr_tail.append(self._partial.decode(errors="replace").rstrip())
            self._partial = b""
        if not self._stderr_done.done():
            self._stderr_done.set_result(None)

    def _watch(self) -> None:
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfds (an old kernel, not Linux): one waiting thread instead
            threading.Thread(target=self._wait_thread, name=f"agentenv-wait-{self.pid}", daemon=True).start()
            return

        def ready() -> None:
            self.loop.remove_reader(pidfd)
            os.close(pidfd)
            self._exit(self.popen.wait())

        try:
            self.loop.add_reader(pidfd, ready)
        except BaseException:
            os.close(pidfd)
            raise

    def _wait_thread(self) -> None:
        code = self.popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(self._exit, code)

    def _exit(self, code: int) -> None:
        if not self.exited.done():
            self.exited.set_result(code)

    def write(self, data: bytes) -> None:
        """Write to the program's stdin (buffered; raises ``BrokenPipeError`` once it is gone)."""
        if self._stdin is None or self._stdin.is_closing():
            raise BrokenPipeError(f"the stdin of process {self.pid} is closed")
        self._stdin.write(data)

    async def stderr_caught_up(self, seconds: float = 0.2) -> str:
        """The last lines of stderr, once the reader reached its end (or after ``seconds``: a child may hold it)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_done), seconds)
        return "\n".join(self.stderr_tail)

    def kill(self) -> None:
        """SIGKILL the program's process group now, and have the reaper sweep its tag."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        _sweep(self.tag)

    def close_pipes(self) -> None:
        """Stop reading and writing and close this process's ends (never waits for a pipe a child still holds)."""
        for end in self._ends:
            end.close()
        self._ends.clear()

    async def end(self, grace: float = 0.0) -> int | None:
        """Wait up to ``grace`` seconds for the program to exit, then kill its group and close the pipes."""
        if grace > 0 and not self.exited.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), grace)
        self.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 5.0)
        self.close_pipes()
        _children.discard(self)
        return self.returncode


async def spawn(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bool = True,
    stderr_to_stdout: bool = False,
) -> Child:
    """Start ``argv`` owned by this process (see the module docstring): its own process group, this owner's tag
    and one of its own in ``$AGENTENV_OWNERS``, pipes for stdin, stdout and stderr, its exit watched.

    Nothing in it awaits: a cancelled caller never leaves a descriptor half handed over (``agentenv.sandbox.pipes``).
    """
    loop = asyncio.get_running_loop()
    tag = uuid.uuid4().hex[:16]
    environ = owned_environ(env, tag)
    made: list[int] = []  # every descriptor made here; the child's ends are closed here once it has its copies
    try:
        stdin_r, stdin_w = _pipe(made) if stdin else (subprocess.DEVNULL, None)
        stdout_r, stdout_w = _pipe(made)
        stderr_r, stderr_w = (None, subprocess.STDOUT) if stderr_to_stdout else _pipe(made)
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=environ,
            stdin=stdin_r,
            stdout=stdout_w,
            stderr=stderr_w,
            start_new_session=True,
        )
    except BaseException:
        for fd in made:
            os.close(fd)
        raise
    for fd in (stdin_r, stdout_w, stderr_w):
        if fd in made:
            os.close(fd)
    child = Child(popen, tag, loop)
    _children.add(child)
    try:
        child._attach(stdin_w, stdout_r, stderr_r)
    except BaseException:
        child.kill()
        raise
    return child


def _pipe(made: list[int]) -> tuple[int, int]:
    read_end, write_end = os.pipe()  # close-on-exec: the child gets its end as 0, 1 or 2 only
    made += [read_end, write_end]
    return read_end, write_end


def kill_all() -> int:
    """SIGKILL every live process this process owns, with its group (at shutdown, past its grace); returns how many."""
    live = [c for c in list(_children) if not c.exited.done()]
    for child in live:
        child.kill()
    return len(live)
