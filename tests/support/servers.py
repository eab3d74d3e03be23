"""Real agentenv servers for the tests: ``agentenv serve`` as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answering(proc: subprocess.Popen[str], url: str, timeout: float = 60.0, verify: Any = True) -> None:
    """Wait until the server ``proc`` runs answers ``GET {url}/health`` with 200; ``RuntimeError`` (with its stderr,
    where it is a pipe) once it exits, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise RuntimeError(f"agentenv serve exited with {proc.returncode}:\n{err}")
        try:
            if httpx.get(url + "/health", timeout=1, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"agentenv serve did not answer on {url} within {timeout} s")


# runs a program with its limit on open files (soft and hard) set to argv[1]: ``agentenv serve`` out of descriptors
_NOFILE = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
           "os.execv(sys.argv[2], sys.argv[2:])")  # fmt: skip


class ServeProcess:
    """``agentenv serve`` as a real subprocess (``nofile``: with that limit on open files; ``scheme`` ``https`` with
    ``verify`` the certificate it serves, for ``--ssl-certfile``)."""

    def __init__(
        self,
        bundle: Path | str,
        *args: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        scheme: str = "http",
        verify: Path | bool = True,
    ):
        self.port = port or free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.verify: Any = verify
        if isinstance(verify, Path):
            import ssl

            self.verify = ssl.create_default_context(cafile=str(verify))
        self.args = [sys.executable, "-m", "agentenv.cli", "serve", str(bundle), "--port", str(self.port),
                     "--log-level", "warning", *args]  # fmt: skip
        if nofile is not None:
            self.args = [sys.executable, "-c", _NOFILE, str(nofile), *self.args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.stdout = ""

    def start(self, timeout: float = 60.0) -> ServeProcess:
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        answering(self.proc, self.url, timeout, verify=self.verify)
        return self

    def terminate(self, timeout: float = 30.0) -> tuple[int, str]:
        """SIGTERM; returns the exit code and stderr (stdout, uvicorn's access log, is kept in ``stdout``)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stdout = out
        return self.proc.returncode, err

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.communicate()
