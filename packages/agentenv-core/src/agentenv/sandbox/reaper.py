"""The reaper of one owner process: ``python -I -S reaper.py TAG`` (run as a script: stdlib only, no site).

``agentenv.sandbox.procs`` starts it with the first process it owns. Its stdin is the lifeline: the owner holds the
write end and never writes to it but to ask for a sweep (``sweep TAG2`` on a line: kill the processes
tagged ``TAG2``, an env that was torn down, so that a child which left its process group goes too; or
``at-exit ["prog", "arg"]``: a command to run at the end). When the lifeline closes (the owner exited,
however: SIGKILL included) or on SIGTERM, it kills every process whose ``$AGENTENV_OWNERS`` lists ``TAG``
(every process the owner started and every descendant that kept the variable), with its process group,
then runs each at-exit command with ``TAG`` as its last argument (what a signal cannot end: containers),
and exits. Linux only (it reads /proc); elsewhere it waits for the lifeline, runs the commands and exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

VAR = b"AGENTENV_OWNERS="


def tagged(tag: bytes) -> list[int]:
    """The processes whose ``$AGENTENV_OWNERS`` lists ``tag`` (this one excluded)."""
    found = []
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone already, or not ours to read
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(VAR):
                if tag in entry[len(VAR) :].split(b":"):
                    found.append(int(name))
                break
    return found


def kill(tag: bytes, rounds: int = 50) -> int:
    """SIGKILL every process tagged ``tag``, with its process group, until none is left; returns how many."""
    killed: set[int] = set()
    for _ in range(rounds):  # a process may fork while it is being killed: look again until none is left
        pids = tagged(tag)
        if not pids:
            break
        for pid in pids:
            killed.add(pid)
            try:
                group = os.getpgid(pid)
                # a group is killed whole only when its leader is tagged: a process started plainly by the owner
                # is in the owner's group, which holds the owner's own parent (a shell, a test runner) too
                if group in pids:
                    os.killpg(group, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone, or not ours
                pass
        time.sleep(0.02)
    return len(killed)


def run_at_exit(commands: list[list[str]], tag: str) -> None:
    """Run each at-exit command with ``tag`` appended (stdin and stdout closed, 60 s each, untagged)."""
    environ = {k: v for k, v in os.environ.items() if k != VAR[:-1].decode()}
    for argv in commands:
        try:
            subprocess.run([*argv, tag], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=environ, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"agentenv: the owner's at-exit command {argv!r} failed: {exc}", file=sys.stderr)


def finish(tag: bytes, commands: list[list[str]]) -> None:
    """The owner is gone: kill what it owned, then run its at-exit commands."""
    if os.path.isdir("/proc/self"):
        count = kill(tag)
        if count:
            print(f"agentenv: the owner process is gone; killed {count} process(es) it had started", file=sys.stderr)
    run_at_exit(commands, tag.decode())


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python reaper.py TAG", file=sys.stderr)
        return 2
    tag = argv[0].encode()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the owner's to handle; the lifeline says when to act
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    commands: list[list[str]] = []
    signal.signal(signal.SIGTERM, lambda *_: (finish(tag, commands), os._exit(0)))
    buffered = b""
    while True:
        chunk = os.read(0, 4096)
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            if line.startswith(b"sweep ") and os.path.isdir("/proc/self"):
                kill(line[6:].strip(), rounds=5)
            elif line.startswith(b"at-exit "):
                command = [str(a) for a in json.loads(line[8:])]
                if command not in commands:  # told again by a restart of the owner's registrations
                    commands.append(command)
    finish(tag, commands)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
