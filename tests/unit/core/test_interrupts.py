"""Ctrl-C stops a command's event loop whichever thread the kernel hands the signal to (``agentenv.interrupts``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# The main thread waits on a future nothing will complete (a model that stalls): its loop sleeps in select with no
# timer due. The SIGINT goes to another thread of the process, as the kernel may pick any thread that does not block
# it (eval has tool, server and executor threads).
PROGRAM = textwrap.dedent(
    """
    import asyncio, signal, sys, threading, time
    from agentenv import interrupts

    cleaned = []

    async def stalled():
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            cleaned.append(True)  # the command's cleanup still runs

    def poke():
        time.sleep(0.5)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # lands on this thread, not the main one

    threading.Thread(target=poke, daemon=True).start()
    try:
        interrupts.run(stalled())
    except KeyboardInterrupt:
        print("interrupted, cleaned up:", cleaned == [True])
        sys.exit(130)
    """
)


def test_a_ctrl_c_landing_on_another_thread_stops_the_loop_and_its_cleanup_runs():
    # before (asyncio.run's own handling, which agentenv eval used), this program slept on: killed at the timeout
    try:
        done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the loop slept through a Ctrl-C that landed on another thread")
    assert done.returncode == 130, done.stderr
    assert done.stdout.strip() == "interrupted, cleaned up: True"
