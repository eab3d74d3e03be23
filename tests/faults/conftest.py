"""The fault matrix: real ``agentenv serve`` processes (and trainers) on loopback, hurt the way operators see them hurt.

Every row runs on both event loops uvicorn offers (``loop``: asyncio's and uvloop, which uvicorn picks wherever it is
installed): ``agentenv serve`` is started with ``--loop``; a row whose server is not ``agentenv serve`` (a trainer
serving in process) parametrizes ``loop`` itself; the hostile policy's rows (what the sandbox lets a policy reach)
run on uvloop only. Every process a test starts carries a marker in its environment
(``$AGENTENV_FAULT_MARK``), inherited by whatever it starts: "processes left" is the count of live processes with the
test's marker, found in /proc, never by asking the code under test. Each test asserts what the issue's matrix asks of
every row: the episodes lost, the env failures scored as 0 (must be 0), the processes left (must be 0), what the client
saw.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Ledger, with_ops
from tests.support.faults import LOOPS, Matrix, left_after


@pytest.fixture(params=LOOPS)
def loop(request: pytest.FixtureRequest) -> str:
    """The event loop of the row's ``agentenv serve`` (``--loop``)."""
    return str(request.param)


@pytest.fixture
def matrix(ledger: Ledger, loop: str) -> Iterator[Matrix]:
    """A row of the fault matrix (its servers write to ``ledger``, on ``loop``); at the end, nothing it started may
    be left."""
    row = Matrix(loop=loop)
    yield row
    for server in row.servers:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()
    stray = left_after(row.mark)
    for pid, _ in stray:  # do not leave them to the next test, then fail this one
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not stray, f"processes left after the test: {stray}"


@pytest.fixture(scope="session")
def ops_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake bundle with the ``ops`` env (programs it starts, descriptors it leaks) and its task ``ops``."""
    return with_ops(tmp_path_factory.mktemp("ops"))
