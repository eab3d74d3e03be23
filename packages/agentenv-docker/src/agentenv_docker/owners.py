"""Whose containers are whose, and removing those of an owner that is gone.

A killed ``docker run`` client does not stop its container: the engine runs it, not the process that asked.
So every container agentenv starts (and its network and workdir volume) carries labels naming its owner
process: its tag (``agentenv.sandbox.procs.owner_tag``), its host, boot, pid and start time. Three things remove them:

- the env's teardown removes its own container, network and volume;
- the owner's reaper runs ``python -m agentenv_docker.owners TAG`` once the owner is gone, however it died
  (``agentenv.sandbox.procs.at_owner_exit``): everything labelled with its tag goes;
- the first container env a process checks removes what owners on this host that no longer run left behind
  (a reaper that was itself killed, a machine that lost power).
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from . import engine

__all__ = ["OWNER", "owner_labels", "remove_gone_owners", "remove_owned"]

OWNER: Final[str] = "agentenv.owner"
_HOST, _BOOT, _PID, _START = "agentenv.host", "agentenv.boot", "agentenv.pid", "agentenv.start"
_KINDS: Final = (  # what is listed and removed, in this order (a network or volume in use cannot go first)
    ("container", ["ps", "-a", "-q"], ["rm", "-f", "-v"]),
    ("network", ["network", "ls", "-q"], ["network", "rm"]),
    ("volume", ["volume", "ls", "-q"], ["volume", "rm", "-f"]),
)


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@functools.cache
def _boot() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def owner_labels() -> dict[str, str]:
    """The labels naming this process as the owner (its tag, host, boot, pid and start time)."""
    from agentenv.sandbox import procs

    pid = os.getpid()
    return {
        OWNER: procs.owner_tag(),
        _HOST: socket.gethostname(),
        _BOOT: _boot(),
        _PID: str(pid),
        _START: _start_time(pid) or "?",
    }


def _alive(labels: Mapping[str, str]) -> bool:
    """Whether the owner these labels name still runs (owners on other hosts are taken to)."""
    if labels.get(_HOST) != socket.gethostname():
        return True
    if labels.get(_BOOT) != _boot():
        return False
    try:
        pid = int(labels.get(_PID, ""))
    except ValueError:
        return True  # not ours to judge
    return _start_time(pid) == labels.get(_START)


def _remove(kind: str, removing: list[str], ids: Iterable[str]) -> int:
    found = sorted(set(ids))
    if found:
        done = engine.run([*removing, *found], timeout=120)
        if not done.ok:
            print(f"agentenv-docker: removing {kind}s {found} failed: {done.err.strip()}", file=sys.stderr)
    return len(found)


def remove_owned(tag: str) -> int:
    """Remove every container, network and volume labelled with owner ``tag``; returns how many containers."""
    counts = []
    for kind, listing, removing in _KINDS:
        listed = engine.run([*listing, "--filter", f"label={OWNER}={tag}"], timeout=60)
        counts.append(_remove(kind, removing, listed.out.split()) if listed.ok else 0)
    return counts[0]


def remove_gone_owners() -> int:
    """Remove what owners on this host that no longer run left behind; returns how many containers."""
    fields = "\t".join(f'{{{{.Label "{k}"}}}}' for k in (OWNER, _HOST, _BOOT, _PID, _START))
    names = {"container": "{{.ID}}", "network": "{{.ID}}", "volume": "{{.Name}}"}
    counts = []
    for kind, listing, removing in _KINDS:
        listed = engine.run([*listing[:-1], "--filter", f"label={OWNER}", "--format", f"{names[kind]}\t{fields}"])
        gone = []
        for line in listed.out.splitlines() if listed.ok else []:
            ident, *values = line.split("\t")
            if not _alive(dict(zip((OWNER, _HOST, _BOOT, _PID, _START), values))):
                gone.append(ident)
        counts.append(_remove(kind, removing, gone))
    return counts[0]


def main(argv: list[str]) -> int:
    """``python -m agentenv_docker.owners TAG``: what the reaper of owner TAG runs once the owner is gone."""
    if len(argv) != 1:
        print("usage: python -m agentenv_docker.owners TAG", file=sys.stderr)
        return 2
    try:
        count = remove_owned(argv[0])
    except engine.EngineMissing as exc:
        print(f"agentenv-docker: cannot remove the containers of owner {argv[0]}: {exc}", file=sys.stderr)
        return 1
    if count:
        print(f"agentenv-docker: the owner is gone; removed {count} container(s) it had started", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
