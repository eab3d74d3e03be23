"""The shell of one ``bash`` episode, run inside its sandbox with ``python -I -S`` (the standard library only).

One per episode, so a call costs a fork and an exec, not a new sandbox, and what a call writes is there for the
next. It reads one JSON request per line on stdin, ``{"command": ..., "seconds": 30, "keep": 64000}``, runs
``bash -c COMMAND`` (stdin empty, stdout and stderr into one pipe, a session of its own), and answers one JSON line
on stdout: ``{"output": ..., "code": N, "timed_out": false}`` (``output``: the first ``keep`` bytes, decoded;
``code``: negative for a signal). Once the command exits (or its ``seconds`` pass), whatever it left running is
killed: every other process of the sandbox's PID namespace with ``--pid-namespace``, else its process group.

It makes itself non-dumpable first: a command cannot open its pipes through ``/proc`` or trace it, so it cannot
forge an answer.
"""

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
LINGER = 0.2  # seconds to read on after the command exits: what a child of it still writes


def main() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    namespace = "--pid-namespace" in sys.argv[1:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as PID 1 it ignores every signal it has no handler for
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing but answers reaches the channel
    for line in sys.stdin:
        request = json.loads(line)
        answer = run(str(request["command"]), request.get("seconds"), int(request.get("keep", 64_000)), namespace)
        channel.write(json.dumps(answer) + "\n")
        channel.flush()


def run(command: str, seconds: float | None, keep: int, namespace: bool) -> dict:
    read_end, write_end = os.pipe()
    # posix_spawn and a pidfd: a call costs a fork and an exec, and its exit is seen the moment it happens
    pid = os.posix_spawnp(
        "bash",
        ["bash", "-c", command],
        os.environ,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, write_end, 1),
            (os.POSIX_SPAWN_DUP2, write_end, 2),
        ],
        setsid=True,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU),  # Python ignores the first two; bash must not
    )
    os.close(write_end)
    exit_fd = os.pidfd_open(pid)
    deadline = None if seconds is None else time.monotonic() + float(seconds)
    kept, timed_out, ended, code = bytearray(), False, None, None
    watched = [read_end, exit_fd]
    try:
        while watched:
            now = time.monotonic()
            if ended is not None and now - ended >= LINGER:
                break  # a child of it still holds the output open
            if deadline is not None and now >= deadline:
                timed_out = True
                break
            wait = None if ended is None else LINGER - (now - ended)
            if deadline is not None:
                wait = max(0.0, deadline - now) if wait is None else min(wait, max(0.0, deadline - now))
            ready, _, _ = select.select(watched, [], [], wait)
            if exit_fd in ready:
                code = _status(os.waitpid(pid, 0)[1])
                ended = time.monotonic()
                watched.remove(exit_fd)
            if read_end in ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    watched.remove(read_end)
                elif len(kept) < keep:
                    kept += chunk[: keep - len(kept)]
    finally:
        kill_left(pid, namespace)
        os.close(read_end)
        os.close(exit_fd)
    if code is None:
        code = _status(os.waitpid(pid, 0)[1])
    with contextlib.suppress(ChildProcessError):  # as PID 1, what was orphaned is its to reap
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    return {"output": kept.decode(errors="replace"), "code": code, "timed_out": timed_out}


def _status(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def kill_left(pid: int, namespace: bool) -> None:
    """Kill the command and whatever it started (a daemon that called setsid too, inside a PID namespace)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if not namespace:
        return
    for _ in range(3):  # a process forking while it is killed: look again
        found = _others()
        for other in found:
            with contextlib.suppress(OSError):
                os.kill(other, signal.SIGKILL)
        if not found:
            return


def _others() -> list[int]:
    """The live processes of this PID namespace but its init (1: this shell, or bwrap's) and this shell."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, os.getpid()):
            with contextlib.suppress(OSError), open(f"/proc/{name}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    found.append(int(name))
    return found


if __name__ == "__main__":
    main()
