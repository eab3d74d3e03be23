"""The fuzz campaign's servers and report (tests/fuzz): a real ``agentenv serve`` watched for exits, tracebacks and
memory, and what the campaign tried and saw."""

from __future__ import annotations

import collections
import re
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.paths import FAKE
from tests.support.procs import memory
from tests.support.servers import ServeProcess

RSS_BOUND = 1 << 30  # a server past 1 GiB of resident memory fails the campaign


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
        now = memory(self.pid)
        self.report.peak_rss[self.loop] = max(self.report.peak_rss.get(self.loop, 0), memory(self.pid, "VmHWM"))
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
