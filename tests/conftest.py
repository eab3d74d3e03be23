"""Fixtures every tier shares: bundle paths, the fake env's ledger, and real servers on loopback."""

from __future__ import annotations

import collections
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# unknown fields in a frame are an error in every test (and in the servers they start), not silently dropped
os.environ.setdefault("AGENTENV_STRICT_WIRE", "1")

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "bundles" / "fake"
INBOX = ROOT / "examples" / "bundles" / "inbox"
ARITH = ROOT / "examples" / "bundles" / "arith"


OPS_ENV = """
  ops:
    kind: python
    target: fake_env:FakeOps
"""
OPS_TASK = """id: ops
split: train
toolset: {envs: [ops]}
turns:
- prompt: Echo 'ops' with the echo tool, then say it.
  verifiers: [{id: answer-1, kind: python, check: fake_env:said_echo}]
"""


def with_ops(folder: Path) -> Path:
    """A copy of the fake bundle in ``folder``, with the ``ops`` env (fake_env.FakeOps: it starts programs and leaks
    descriptors) and a task ``ops`` using it: the fault matrix's bundle (the fake one's toolsets stay as they are)."""
    import shutil

    target = folder / "fake"
    if not target.exists():
        shutil.copytree(FAKE, target, ignore=shutil.ignore_patterns("__pycache__"))
        text = (target / "bundle.yaml").read_text()
        (target / "bundle.yaml").write_text(text.replace("\ndefaults:", OPS_ENV.rstrip() + "\ndefaults:", 1))
        (target / "tasks" / "ops.yaml").write_text(OPS_TASK)
    return target


class Ledger:
    """What the fake env did, read from the file its $AGENTENV_FAKE_LEDGER points at."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[str]:
        if not self.path.exists():
            return []
        return [line.rsplit(" ", 1)[0] for line in self.path.read_text().splitlines() if line]

    def count(self, event: str) -> int:
        return collections.Counter(self.events())[event]

    def wait_for(self, event: str, n: int, timeout: float = 10.0) -> int:
        """Wait until ``event`` happened at least ``n`` times; returns the count."""
        deadline = time.monotonic() + timeout
        while self.count(event) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.count(event)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """A fresh ledger; envs in this process and in servers started after it write to it."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("AGENTENV_FAKE_LEDGER", str(path))
    return Ledger(path)


def running(marker: str) -> list[int]:
    """The live processes whose command line carries ``marker`` (zombies left out): how a test finds a process a
    sandboxed program started, whose own pid is of the sandbox's PID namespace."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or marker.encode() not in (entry / "cmdline").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited and not yet waited for, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def serve() -> Iterator[Callable[..., Any]]:
    """Start ``build_app(bundle, **kwargs)`` in this process on a loopback port; returns the ServerThread."""
    from agentenv_server import ServerThread, build_app

    running: list[Any] = []

    def start(bundle: Path | str = FAKE, *, thread_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        server = ServerThread(build_app(bundle, **kwargs), **(thread_options or {})).start()
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop()


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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _, err = self.proc.communicate()
                raise RuntimeError(f"agentenv serve exited with {self.proc.returncode}:\n{err}")
            try:
                if httpx.get(self.url + "/health", timeout=1, verify=self.verify).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"agentenv serve did not answer on {self.url} within {timeout} s")

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


@pytest.fixture
def serve_process() -> Iterator[Callable[..., ServeProcess]]:
    """Start ``agentenv serve`` subprocesses; they are stopped at the end of the test."""
    started: list[ServeProcess] = []

    def start(bundle: Path | str = FAKE, *args: str, **kwargs: Any) -> ServeProcess:
        process = ServeProcess(bundle, *args, **kwargs).start()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc is not None and process.proc.poll() is None:
            process.terminate()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the garbage the tests left (stopped servers' loops and their pending tasks) before the run's summary:
    a collection whose finalizers run in the middle of the compile of a module imported then (the hypothesis
    plugin imports hypothesis there) trips CPython 3.11's "AST constructor recursion depth mismatch" SystemError
    (cpython gh-106905), which fails a run whose tests all passed."""
    gc.collect()
