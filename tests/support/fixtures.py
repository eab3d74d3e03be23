"""The fixtures every tier shares, one meaning to a name (a pytest plugin: the root conftest registers it, so no
test imports a fixture by name).

``fake_bundle`` is the fake bundle loaded, ``fake_copy`` a copy of it to patch; a tier's own ``fake_server`` (a
served one) stays with its tier."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bundles import Ledger, copy_bundle
from tests.support.harness import HARNESS, Engine
from tests.support.paths import FAKE
from tests.support.servers import ServeProcess


@pytest.fixture(scope="module")
def fake_bundle() -> Any:
    """The fake bundle, loaded once for the module (its envs are started per episode, never shared)."""
    from agentenv import load_bundle

    return load_bundle(FAKE)


@pytest.fixture
def fake_copy(tmp_path: Path) -> Path:
    """A copy of the fake bundle in ``tmp_path``, for a test to patch."""
    return copy_bundle(tmp_path, FAKE)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """A fresh ledger; envs in this process and in servers started after it write to it."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("AGENTENV_FAKE_LEDGER", str(path))
    return Ledger(path)


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
