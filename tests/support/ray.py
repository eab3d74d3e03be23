"""The Ray tier's server: ``agentenv serve --ray`` as a real subprocess that starts its own local Ray on loopback.

Every process the server starts (Ray's own, the replicas, their reapers, the env programs) inherits
``AGENTENV_TEST_RUN``, so a test can find each one that is left, whoever its parent is now.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from tests.support import FAKE, Ledger, ServeProcess
from tests.support.procs import parent_of, read, with_env

__all__ = [
    "PER_REPLICA",
    "RUN_VAR",
    "TOKEN",
    "TOKEN_VAR",
    "RayServer",
    "parent_of",
    "processes_of",
    "ray_token",
    "starter_of",
]

TOKEN = "tok-ray-5b1e0c"
TOKEN_VAR = "AGENTENV_RAY_TEST_TOKEN"
RUN_VAR = "AGENTENV_TEST_RUN"
PER_REPLICA = 16


def processes_of(marker: str, session: int | None = None) -> list[int]:
    """Live processes whose environment has ``AGENTENV_TEST_RUN=marker``, or that are in ``session``.

    Both, because Ray's own processes rename themselves (``ray::...``, setproctitle), which can overwrite
    what /proc shows of their environment, and the reapers start sessions of their own.
    """
    return with_env(RUN_VAR, marker, session=session)


def ray_token(folder: Path) -> dict[str, str]:
    """The environment of a Ray with token auth whose token is a new file in ``folder``.

    Ray reads ``RAY_AUTH_TOKEN_PATH``; without it, ``~/.ray/auth_token``, which a fresh machine lacks
    (``ray start`` then refuses) and which the first local ``ray.init`` writes (so a test's outcome would
    depend on what ran before it on that machine).
    """
    path = folder / "auth_token"
    path.write_text(secrets.token_hex(32))
    path.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def starter_of(program: int) -> int:
    """The process that started a sandboxed env program: its first ancestor that is not its sandbox (bwrap)."""
    pid = parent_of(program)
    while read(pid, "cmdline").split(b"\0", 1)[0].endswith(b"bwrap"):
        pid = parent_of(pid)
    return pid


class RayServer(ServeProcess):
    """``agentenv serve FAKE --ray`` with a token, its own Ray temp dir, ledger and run marker, in its own session."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.marker = uuid.uuid4().hex
        self.ray_dir = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.ledger = Ledger(tmp / "ledger.txt")
        own = {TOKEN_VAR: TOKEN, RUN_VAR: self.marker, "RAY_TMPDIR": str(self.ray_dir),
               "AGENTENV_FAKE_LEDGER": str(self.ledger.path), "RAY_USAGE_STATS_ENABLED": "0",
               **ray_token(self.ray_dir)}  # fmt: skip
        super().__init__(FAKE, "--ray", "--token-var", TOKEN_VAR, *args, env={**own, **(env or {})})

    def start(self, timeout: float = 180.0) -> RayServer:
        """Start; returns once the driver says it serves (every replica answers), stderr going to a file."""
        self.log = self.ray_dir / "driver.log"  # a file, not a pipe: Ray's log lines would fill a pipe
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while "agentenv: serving" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agentenv serve --ray did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.2)
        return self

    def terminate(self, timeout: float = 120.0) -> tuple[int, str]:
        """SIGTERM; returns the exit code and stderr."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.log.read_text(errors="replace")

    def leftovers(self) -> list[int]:
        """Processes of this run still alive: the server, Ray's, the replicas', their reapers', the envs'."""
        assert self.proc is not None
        return processes_of(self.marker, session=self.proc.pid)

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
            self.terminate()
        shutil.rmtree(self.ray_dir, ignore_errors=True)
