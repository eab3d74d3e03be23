"""Clients that drop their connection while their reset starts an env program, on both event loops.

A killed or OOM-killed trainer drops its connections mid-reset. Under uvloop that cancelled ``procs.spawn`` half
way and left pipe descriptors that were closed a second time after reuse: libuv aborted the whole server (exit
134, every session lost) within a few dozen drops.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time

import pytest
from agentenv.client.settings import Shared

from tests.support.faults import Matrix, play, run
from tests.support.wire import half_open, reset_data

DROPS = 120


def test_clients_dropping_mid_reset_never_take_the_server_down(matrix: Matrix, loop: str) -> None:
    server = matrix.serve()  # on each loop (the matrix's): uvloop aborted
    jitter = random.Random(23)  # drops land at every stage of the reset: before, during and after the spawn
    assert server.proc is not None
    for attempt in range(DROPS):
        with contextlib.suppress(OSError):  # a dead server's port refuses; a reset in flight may be cut
            sock = half_open(server.url, {"type": "reset", "data": reset_data(task_id="proc-echo")}, timeout=30)
            time.sleep(jitter.random() * 0.03)
            if attempt % 2:  # half of them RST (a killed process's kernel), half FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        if server.proc.poll() is not None:
            stderr = server.proc.communicate()[1]
            exited = f"agentenv serve --loop {loop} exited with {server.proc.returncode}"
            pytest.fail(f"{exited} after {attempt + 1} dropped resets:\n{stderr[-2000:]}")
    record = run(play(Shared(server.url, reset_timeout=60), "proc-echo", [("echo", {"text": "sub"})], "sub"))
    result = matrix.saw(record)
    assert (result.outcome, result.reward) == ("scored", 1.0)  # the server still plays subprocess envs
    code, stderr = server.terminate()
    assert code == 0, stderr
