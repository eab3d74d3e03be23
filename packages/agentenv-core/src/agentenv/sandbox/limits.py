"""Limits of a sandbox on the host: a cgroup per sandbox for memory and processes, rlimits for the rest.

Why both: memory and process counts must be limited for everything in a sandbox together (a fork bomb is many
processes, each small), which only a cgroup does; an rlimit counts one process (``RLIMIT_AS`` counts address
space, not memory, and breaks runtimes that reserve much of it; ``RLIMIT_NPROC`` counts every process of the
user, on the whole machine). CPU time and file size are per process by nature: rlimits (``prlimit``), whose
signals (``SIGXCPU``, ``SIGXFSZ``) say which was hit. A cgroup v1 hierarchy (``/sys/fs/cgroup/memory``,
``/sys/fs/cgroup/pids``) or a delegated v2 one is used, as a child of this process's own cgroup; where neither can
be written (no root, no delegation), memory and process limits are said at start to be off.

A sandbox's programs enter its cgroup before they start: the launch is ``sh -c 'echo $$ > cgroup.procs...; exec
prlimit ... -- ARGV'`` (a fork from this threaded process cannot run Python code between fork and exec safely).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import uuid
from pathlib import Path

from agentenv.sandboxing import Limits

__all__ = ["Cgroup", "cgroup_support", "limited_argv"]

ROOT = Path("/sys/fs/cgroup")
_MB = 1024 * 1024


@functools.cache
def cgroup_support() -> tuple[str, dict[str, Path]] | None:
    """``("v1", {"memory": dir, "pids": dir})`` or ``("v2", {"": dir})``: where this process may make child
    cgroups for memory and pids; None where it may not."""
    own = _own_cgroups()
    v1 = {c: ROOT / c / own[c].lstrip("/") for c in ("memory", "pids") if c in own and (ROOT / c).is_dir()}
    if len(v1) == 2 and all(os.access(p, os.W_OK) for p in v1.values()):
        return "v1", v1
    if "" in own and (ROOT / "cgroup.controllers").is_file():
        base = ROOT / own[""].lstrip("/")
        with contextlib.suppress(OSError):
            enabled = set((base / "cgroup.subtree_control").read_text().split())
            if {"memory", "pids"} <= enabled and os.access(base, os.W_OK):
                return "v2", {"": base}
    return None


def _own_cgroups() -> dict[str, str]:
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    return found


class Cgroup:
    """One sandbox's cgroup (memory and pids), made with its limits; ``remove()`` kills what is left in it."""

    def __init__(self, limits: Limits, name: str) -> None:
        self.limits = limits
        self.dirs: list[Path] = []
        self._seen = (0, 0)  # the OOM kills and refused forks counted at the last breach()
        support = cgroup_support()
        if support is None or (limits.memory_mb is None and limits.pids is None):
            return
        version, bases = support
        _sweep_once(tuple(bases.values()))
        # the owner's pid first: a later process removes what a killed one left (_sweep)
        leaf = f"agentenv-{os.getpid()}-{name}-{uuid.uuid4().hex[:12]}"
        self.version = version
        try:
            for base in bases.values():
                path = base / leaf
                path.mkdir()
                self.dirs.append(path)
            self._write_limits(bases)
        except OSError:
            self.remove()
            raise

    def _write_limits(self, bases: dict[str, Path]) -> None:
        memory, pids = self.limits.memory_mb, self.limits.pids
        if self.version == "v2":
            leaf = self.dirs[0]
            if memory is not None:
                (leaf / "memory.max").write_text(str(memory * _MB))
                with contextlib.suppress(OSError):
                    (leaf / "memory.swap.max").write_text("0")
            if pids is not None:
                (leaf / "pids.max").write_text(str(pids))
            return
        mem, pid = (self.dirs[list(bases).index(c)] for c in ("memory", "pids"))
        if memory is not None:
            (mem / "memory.limit_in_bytes").write_text(str(memory * _MB))
            with contextlib.suppress(OSError):  # only where swap accounting is on: no swapping past the limit
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory * _MB))
        if pids is not None:
            (pid / "pids.max").write_text(str(pids))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a program writes its pid to before it starts."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def breach(self) -> str | None:
        """Which of its limits was hit since the last call (the OOM killer ran, a fork was refused), or None."""
        if not self.dirs:
            return None
        if self.version == "v2":
            events = _counters(self.dirs[0] / "memory.events")
            pid_events = _counters(self.dirs[0] / "pids.events")
        else:
            events = _counters(self.dirs[0] / "memory.oom_control")
            pid_events = _counters(self.dirs[1] / "pids.events")
        counts = (events.get("oom_kill", 0), pid_events.get("max", 0))
        (ooms, forks), self._seen = (now - then for now, then in zip(counts, self._seen, strict=True)), counts
        if ooms > 0:
            return f"memory limit ({self.limits.memory_mb} MiB)"
        if forks > 0:
            return f"process limit ({self.limits.pids} processes)"
        return None

    def remove(self) -> None:
        """Kill every process still in it, then remove it."""
        for path in reversed(self.dirs):
            for _ in range(50):
                pids = _pids(path)
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    path.rmdir()
                    break
                if not pids:
                    os.sched_yield()
        self.dirs = []


@functools.cache
def _sweep_once(bases: tuple[Path, ...]) -> None:
    _sweep(bases)


def _sweep(bases: tuple[Path, ...]) -> None:
    """Remove the empty cgroups that processes no longer alive left (a server killed by SIGKILL never runs its
    ``remove()``; its sandboxes died with it, their cgroups stay). One still holding a process is left alone (the
    kernel refuses to remove it), and so is every one whose owner lives."""
    for base in bases:
        with contextlib.suppress(OSError):
            for leaf in base.glob("agentenv-*"):
                owner = leaf.name.split("-")[1]
                if owner.isdigit() and not _alive(int(owner)):
                    with contextlib.suppress(OSError):
                        leaf.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _counters(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
    return out


def _pids(path: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    return []


def limited_argv(argv: list[str], limits: Limits, cgroup: Cgroup | None) -> list[str]:
    """``argv`` started inside ``cgroup`` (when it has one) with the per-process rlimits of ``limits``."""
    rlimits = []
    if limits.cpu_seconds is not None:  # SIGXCPU at the soft limit, SIGKILL a second later if it is ignored
        rlimits.append(f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}")
    if limits.file_mb is not None:
        rlimits.append(f"--fsize={limits.file_mb * _MB}")
    out = ["prlimit", *rlimits, "--", *argv] if rlimits else list(argv)
    files = cgroup.procs_files if cgroup is not None else []
    if files:
        script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 126; shift; done; shift; exec "$@"'
        out = ["/bin/sh", "-c", script, "sh", *files, "--", *out]
    return out
