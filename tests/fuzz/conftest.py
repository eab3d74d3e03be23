"""The fuzz campaign: Hypothesis against real ``agentenv serve`` processes (and against bundle loading).

Budget: ``$AGENTENV_FUZZ_EXAMPLES`` inputs per test (default ``DEFAULT_EXAMPLES``, about two minutes for the
folder in CI); ``bench/fuzz.py`` runs it long. ``$AGENTENV_FUZZ_REPORT``: a JSON file the campaign writes at its
end: the inputs tried per kind, the servers' crashes, the sessions lost and each server's peak RSS. Hypothesis keeps
no example database unless ``$AGENTENV_FUZZ_DB`` names a folder (a failure prints the input and its seed either way).
"""

from __future__ import annotations

import collections
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.conftest import FAKE, ServeProcess

DEFAULT_EXAMPLES = 100
LOOPS = ("asyncio", "uvloop")
RSS_BOUND = 1 << 30  # a server past 1 GiB of resident memory fails the campaign

_db = os.environ.get("AGENTENV_FUZZ_DB")
settings.register_profile(
    "agentenv-fuzz",
    max_examples=int(os.environ.get("AGENTENV_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)),
    deadline=None,  # a real server on a shared machine: time is not the property
    database=DirectoryBasedExampleDatabase(_db) if _db else None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.load_profile("agentenv-fuzz")


def rss(pid: int, field_name: str = "VmRSS") -> int:
    """A process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no {field_name}")


@dataclass
class Report:
    """What the campaign tried and saw, written to ``$AGENTENV_FUZZ_REPORT`` at the end."""

    tried: collections.Counter[str] = field(default_factory=collections.Counter)
    crashes: list[str] = field(default_factory=list)
    sessions_lost: list[str] = field(default_factory=list)
    peak_rss: dict[str, int] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": dict(sorted(self.tried.items())),
            "inputs_total": sum(self.tried.values()),
            "crashes": self.crashes,
            "sessions_lost": self.sessions_lost,
            "peak_rss_mib": {k: round(v / 2**20, 1) for k, v in self.peak_rss.items()},
            "seconds": round(time.monotonic() - self.began, 1),
        }


@pytest.fixture(scope="session")
def fuzz_report() -> Iterator[Report]:
    """The campaign's report (every fuzz test of the folder adds to it)."""
    report = Report()
    yield report
    path = os.environ.get("AGENTENV_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(report.as_dict(), indent=2) + "\n")


class FuzzServer:
    """One ``agentenv serve`` of the fake bundle on ``loop``, watched: it must never exit and stay under RSS_BOUND."""

    def __init__(self, loop: str, report: Report) -> None:
        self.loop = loop
        self.report = report
        limits = (
            "--tool-timeout",
            "3",
            "--reset-timeout",
            "10",
            "--max-message-bytes",
            "200000",
            "--max-frame-bytes",
            "1000000",
            "--max-concurrent-envs",
            "16",
            "--idle-timeout",
            "600",
        )
        self.process = ServeProcess(FAKE, "--loop", loop, *limits).start()
        assert self.process.proc is not None
        self.pid = self.process.proc.pid

    @property
    def url(self) -> str:
        return self.process.url

    def check(self, what: str) -> None:
        """Fail (and count a crash) if the server exited; fail if it is over its memory bound."""
        assert self.process.proc is not None
        code = self.process.proc.poll()
        if code is not None:
            _, err = self.process.proc.communicate()
            self.report.crashes.append(f"{self.loop}: exit {code} after {what}")
            raise AssertionError(f"agentenv serve --loop {self.loop} exited {code} after {what}:\n{err[-3000:]}")
        now = rss(self.pid)
        self.report.peak_rss[self.loop] = max(self.report.peak_rss.get(self.loop, 0), rss(self.pid, "VmHWM"))
        assert now < RSS_BOUND, f"agentenv serve --loop {self.loop} holds {now >> 20} MiB after {what}"

    def stop(self) -> None:
        self.check("the campaign")
        code, stderr = self.process.terminate()
        assert code == 0, stderr[-3000:]
        found = servers_tracebacks(stderr)
        assert not found, "\n\n".join(found)[-3000:]


def servers_tracebacks(stderr: str) -> list[str]:
    """The tracebacks of ``stderr`` that end in the server's code: one ending in the bundle's own files is an env
    failing as the fake bundle's deploy-fails task does on purpose, logged as the env's fault (never trained on)."""
    found = []
    for block in stderr.split("Traceback (most recent call last):")[1:]:
        lines = block.splitlines()
        end = next((i for i, line in enumerate(lines[1:], 1) if line and not line.startswith(" ")), len(lines))
        frames = re.findall(r'^\s+File "([^"]+)"', "\n".join(lines[:end]), flags=re.M)
        if not frames or not frames[-1].startswith(str(FAKE)):
            found.append("\n".join(lines[: end + 1]))
    return found


@pytest.fixture(scope="module", params=LOOPS)
def fuzz_server(request: pytest.FixtureRequest, fuzz_report: Report) -> Iterator[FuzzServer]:
    """A real server on each of uvicorn's loops, for a module's fuzz tests; at the end it must still run, exit 0 at
    SIGTERM and have logged no traceback."""
    server = FuzzServer(str(request.param), fuzz_report)
    yield server
    server.stop()
