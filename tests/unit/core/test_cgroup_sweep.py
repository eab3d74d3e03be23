"""A sandbox's cgroup outlives a server killed by SIGKILL (its ``remove()`` never runs); the next process that makes
one removes the empty ones whose owner is gone, and never one whose owner lives (real cgroups of this machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from agentenv.sandbox import Limits
from agentenv.sandbox.limits import Cgroup, cgroup_support

# a "server" that makes one sandbox's cgroup, says where, and waits to be killed
KILLED = """
import sys, time
from agentenv.sandbox import Limits
from agentenv.sandbox.limits import Cgroup
cgroup = Cgroup(Limits(memory_mb=64, pids=16), "killed")
print(*cgroup.dirs, flush=True)
time.sleep(600)
"""
NEXT = """
from agentenv.sandbox import Limits
from agentenv.sandbox.limits import Cgroup
Cgroup(Limits(memory_mb=64, pids=16), "next").remove()
"""


def test_what_a_sigkilled_process_left_is_removed_by_the_next_and_a_live_ones_is_not():
    support = cgroup_support()
    assert support is not None, "this test needs cgroups this process may write (root, or a delegated v2 tree)"
    mine = Cgroup(Limits(memory_mb=64, pids=16), "live")  # a live owner's (this process's)
    killed = subprocess.Popen([sys.executable, "-c", KILLED], stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None
    left = [Path(p) for p in killed.stdout.readline().split()]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert left and all(p.is_dir() for p in left), left  # before: these stayed for good, one per sandbox
    # the next process to make a sandbox's cgroup (a server started again) sweeps
    done = subprocess.run([sys.executable, "-c", NEXT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left), [p for p in left if p.exists()]
    assert mine.dirs and all(p.is_dir() for p in mine.dirs)  # its owner lives: kept
    kept = list(mine.dirs)
    mine.remove()
    assert not any(p.exists() for p in kept)
