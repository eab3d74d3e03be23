"""The env-process guardian of a Ray Serve replica: ``python -m agentenv_server._guardian TAG``.

A replica that Ray kills (a crash, OOM, the end of a drain, ``ray.kill``) gets no chance to tear
its episodes down, and the env programs it started run in sessions of their own (so that teardown
can kill a program with its children): nothing else would ever end them. The replica starts this
process with a pipe on its stdin and the variable ``AGENTENV_REPLICA=TAG`` in its own environment,
which every env program it starts inherits. When the pipe closes (the replica is gone, however it
went), the guardian kills every process whose environment carries the tag, with its process group,
and exits. Linux only (it reads /proc); elsewhere it exits at once and the replica warns.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

__all__ = ["TAG_VAR", "main", "tagged"]

TAG_VAR = "AGENTENV_REPLICA"


def tagged(tag: str) -> list[int]:
    """The processes whose environment carries ``AGENTENV_REPLICA=tag`` (this one excluded)."""
    marker = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone already, or not ours to read
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_tagged(tag: str, rounds: int = 20) -> int:
    """SIGKILL every tagged process and its process group until none is left; returns how many were found."""
    killed: set[int] = set()
    for _ in range(rounds):  # a program may fork while it is being killed: look again until none is left
        pids = tagged(tag)
        if not pids:
            break
        for pid in pids:
            killed.add(pid)
            try:
                group = os.getpgid(pid)
                if group != os.getpgid(0):
                    os.killpg(group, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    return len(killed)


def main(argv: list[str] | None = None) -> int:
    """Wait for stdin to close, then kill the tagged processes."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0]:
        print("usage: python -m agentenv_server._guardian TAG", file=sys.stderr)
        return 2
    if not Path("/proc/self/environ").exists():
        return 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver; the pipe says when to act
    while sys.stdin.buffer.read(65536):
        pass
    count = kill_tagged(args[0])
    if count:
        print(f"agentenv: the replica is gone; killed {count} env process(es) it left behind", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
