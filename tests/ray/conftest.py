"""The Ray tier: ``agentenv serve --ray`` as a real subprocess that starts its own local Ray on loopback.

Every process the server starts (Ray's own, the replicas, the guardians, the env programs) inherits
``AGENTENV_TEST_RUN``, so a test can find each one that is left, whoever its parent is now.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import FAKE, Ledger, ServeProcess

TOKEN = "tok-ray-5b1e0c"
TOKEN_VAR = "AGENTENV_RAY_TEST_TOKEN"
RUN_VAR = "AGENTENV_TEST_RUN"
PER_REPLICA = 16


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment has ``AGENTENV_TEST_RUN=marker`` (zombies are not alive)."""
    needle = f"{RUN_VAR}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_until(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)


class RayServer(ServeProcess):
    """``agentenv serve FAKE --ray --replicas 2`` with a token, its own Ray temp dir, ledger and run marker."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.marker = uuid.uuid4().hex
        self.ray_dir = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.ledger = Ledger(tmp / "ledger.txt")
        env = {TOKEN_VAR: TOKEN, RUN_VAR: self.marker, "RAY_TMPDIR": str(self.ray_dir),
               "AGENTENV_FAKE_LEDGER": str(self.ledger.path), "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
        super().__init__(FAKE, "--ray", "--token-var", TOKEN_VAR, *args, env=env)

    def start(self, timeout: float = 180.0, replicas: int = 2) -> RayServer:
        super().start(timeout)  # /health answers once the first replica is up; wait for all of them
        wait_until(lambda: len(self.replicas_answering()) >= replicas, timeout, f"{replicas} replicas answer")
        return self

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def replicas_answering(self, n: int = 40) -> dict[str, list[bytes]]:
        """Ask the Task API ``n`` times at once; the bodies each replica answered, by replica."""
        import asyncio

        async def ask() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                url = f"{self.url}/fake/tasks"
                calls = [client.post(url, json={"split": "train"}, headers=self.headers) for _ in range(n)]
                return await asyncio.gather(*calls)

        by_replica: dict[str, list[bytes]] = {}
        for response in asyncio.run(ask()):
            assert response.status_code == 200, response.text
            by_replica.setdefault(response.headers["x-agentenv-replica"], []).append(response.content)
        return by_replica

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.terminate(timeout=120)
        shutil.rmtree(self.ray_dir, ignore_errors=True)


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
