"""The Ray tier: ``agentenv serve --ray`` as a real subprocess that starts its own local Ray on loopback (the server
and its helpers: tests.support.ray)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.ray import PER_REPLICA, TOKEN, TOKEN_VAR, RayServer


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayServer]:
    """One server of 2 replicas of PER_REPLICA sessions for the module (Ray takes tens of seconds to start here)."""
    server = RayServer(tmp_path_factory.mktemp("ray"), "--replicas", "2", "--max-concurrent-envs", str(PER_REPLICA))
    os.environ[TOKEN_VAR] = TOKEN
    try:
        yield server.start()
    finally:
        server.cleanup()
        os.environ.pop(TOKEN_VAR, None)
