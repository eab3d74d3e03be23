"""Helpers of the containers tier: the docker CLI as the tests see the engine, and a play of the probe task.

What a test leaves on the engine is counted by the owner labels every agentenv container carries, never by
asking the code under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import EpisodeLost
from agentenv.wire import EpisodeResult, ToolAnswer

from tests.support.waiting import wait_until

HERE = Path(__file__).resolve().parents[1] / "containers"  # the tier's own folder: its bundles
BOX = HERE / "bundles" / "box"
BASE = "agentenv-test/python:bookworm"
_LISTING = {"container": ["ps", "-a", "-q"], "network": ["network", "ls", "-q"], "volume": ["volume", "ls", "-q"]}


def docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    """Run the docker CLI; its stdout."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def agentenv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The agentenv CLI as a program."""
    environ = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "agentenv.cli", *args], capture_output=True, text=True, env=environ, timeout=300
    )


def of_process(pid: int, kind: str = "container") -> list[str]:
    """What the engine holds that process ``pid`` started (by its owner labels)."""
    return docker(*_LISTING[kind], "--filter", f"label=agentenv.pid={pid}").split()


def wait_until_none(pid: int, seconds: float = 60.0) -> dict[str, list[str]]:
    """Wait until the engine holds nothing of process ``pid`` (containers, networks, volumes); what is left."""

    def left() -> dict[str, list[str]]:
        return {kind: found for kind in _LISTING if (found := of_process(pid, kind))}

    wait_until(lambda: not left(), seconds, interval=0.5)
    return left()


@dataclass
class Probe:
    """What one play of the box bundle's ``probe`` task saw: each tool's answer and the episode's result."""

    answers: list[ToolAnswer]
    result: EpisodeResult


async def probe(url: str, calls: Sequence[tuple[str, dict[str, Any]]], reply: str = "done") -> Probe:
    """Play the ``probe`` task once on the server at ``url``: ``calls`` in order, then ``reply`` (unless lost)."""
    session = Session(Shared(url, reset_timeout=300, tool_timeout=120))
    rollout = session.rollout("probe")
    answers = []
    try:
        await rollout.start()
        for tool, args in calls:
            answers.append(await rollout.call(tool, args))
        await rollout.end_turn(reply)
    except EpisodeLost:
        pass
    finally:
        result = rollout.result
        await session.close()
    assert result is not None
    return Probe(answers, result)
