"""Helpers of the harness tests: the harness bundle, a stand-in engine, factories closed after each test."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.vllm_standin import Served, StandinEngine, serve

HARNESS = ROOT / "tests" / "fixtures" / "bundles" / "harness"
PLACEHOLDER = "http://127.0.0.1:9/v1"  # where the harness bundle's judges and user simulators point until patched


def _probe(request: dict[str, Any]) -> bool:
    first = str((request.get("messages") or [{}])[0].get("content"))
    return first.startswith(("Reply with", "Use the bash tool to list the files"))


class Engine:
    """A running stand-in engine: its state (requests, models) and its URL."""

    def __init__(self, models: list[str] | None = None, mode: str = "tokens") -> None:
        self.state: StandinEngine
        self.server: Served
        self.state, self.server = serve(models, mode)
        self.url = self.server.url

    def chats(self) -> list[dict[str, Any]]:
        """The chat requests it got, without the capture proxy's probes of the engine."""
        with self.state.lock:
            return [r for r in self.state.requests if r.get("messages") and not _probe(r)]

    def saw(self, text: str) -> bool:
        """Whether any chat request's messages held ``text``."""
        return any(text in str(r.get("messages")) for r in self.chats())


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    """A stand-in vLLM engine serving ``tiny/policy`` (token ids and processed log-probs)."""
    running = Engine()
    yield running
    running.server.stop()


@pytest.fixture(scope="session")
def agent_bin() -> Path:
    """The folder of the agent CLIs a nox session installed (claude, opencode): ``$AGENTENV_AGENT_BIN``."""
    folder = os.environ.get("AGENTENV_AGENT_BIN")
    assert folder, "run this tier with nox (nox -s harness, or -s containers): each installs the agent CLIs from npm"
    path = Path(folder)
    assert (path / "claude").exists() and (path / "opencode").exists(), f"no agent CLIs in {path}"
    return path


@pytest.fixture
def make_factory(engine: Engine) -> Iterator[Callable[..., Any]]:
    """Build ``AgentEnvSessionFactory``s on the harness bundle against the stand-in; all are closed after the test."""
    from agentenv_harness import AgentEnvSessionFactory

    made: list[Any] = []

    def make(bundle: Path | str = HARNESS, **kwargs: Any) -> Any:
        kwargs.setdefault("llm_url", engine.url)
        kwargs.setdefault("model", "tiny/policy")
        kwargs.setdefault("deadline", 120.0)
        factory = AgentEnvSessionFactory(bundle, **kwargs)
        made.append(factory)
        return factory

    yield make
    for factory in made:
        factory.close()


def prompt_of(bundle: Path | str, task_id: str, split: str) -> list[dict[str, str]]:
    """The prompt of ``task_id``'s row in ``prompt_rows(bundle, split)``."""
    from agentenv_harness import prompt_rows

    rows = prompt_rows(bundle, split)
    return next(row["prompt"] for row in rows if row["task_id"] == task_id)


def group_gone(pgid: int) -> bool:
    """Whether no process of the process group ``pgid`` is left running (a killed child the init process has not
    reaped yet is a zombie: it runs nothing)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            return False
    return True


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
