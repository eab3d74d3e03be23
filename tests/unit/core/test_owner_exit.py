"""``procs.at_owner_exit``: the owner's reaper runs a command once the owner is gone, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support import wait_until

# an owner: registers a command that appends its last argument (the owner's tag) to a file, says its tag, waits
OWNER = textwrap.dedent(
    """
    import os, signal, sys, time
    from agentenv.sandbox import procs
    note = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + chr(10))", sys.argv[1]]
    procs.at_owner_exit(note)
    procs.at_owner_exit(note)  # again: still once
    if sys.argv[2] == "restart":  # the reaper dies; the next owned process starts another, told the same commands
        os.kill(procs._reaper, signal.SIGKILL)
        time.sleep(0.5)
        procs.owned_environ()
    print(procs.owner_tag(), flush=True)
    time.sleep(600)
    """
)


def run_owner(tmp_path: Path, how: str) -> tuple[str, Path]:
    """Start an owner, SIGKILL it once it said its tag; returns the tag and the file its command writes."""
    out = tmp_path / "ran.txt"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(out), how], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    tag = owner.stdout.readline().strip()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    wait_until(out.exists, 30)
    time.sleep(0.5)  # a second run, if there were one, would have written by now
    return tag, out


def test_a_sigkilled_owners_reaper_runs_its_at_exit_command_once_with_its_tag(tmp_path: Path) -> None:
    tag, out = run_owner(tmp_path, "plain")
    assert len(tag) == 16
    assert out.read_text().splitlines() == [tag]


def test_a_restarted_reaper_is_told_the_commands_registered_before(tmp_path: Path) -> None:
    tag, out = run_owner(tmp_path, "restart")
    assert out.read_text().splitlines() == [tag]
