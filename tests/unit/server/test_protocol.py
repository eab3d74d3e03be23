"""Protocol fidelity, both ways: OpenEnv's own client plays an agentenv server, and agentenv's client (its
transport) drives a bare OpenEnv server and reads OpenEnv's own error codes. Also the version check and the
strict reading of frames, against real servers of another protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.client.taskapi import probe
from agentenv.client.transport import ErrorFrame, Transport
from agentenv.errors import ProtocolError, ProtocolMismatch
from agentenv.wire import PROTOCOL
from agentenv_server import ServerThread, import_openenv

from tests.support import FAKE

import_openenv()

from openenv.core import Action, Environment, Observation, State, create_fastapi_app  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402


class CountAction(Action):
    by: int = 1


class CountObservation(Observation):
    count: int = 0


class Counter(Environment[CountAction, CountObservation, State]):
    """A bare OpenEnv env: nothing of agentenv's."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="bare", step_count=0)
        self._count = 0

    def reset(self, seed: Any = None, episode_id: Any = None, **kwargs: Any) -> CountObservation:
        self._count = 0
        return CountObservation(count=0)

    def step(self, action: CountAction, timeout_s: Any = None, **kwargs: Any) -> CountObservation:
        self._count += action.by
        self._state.step_count += 1
        return CountObservation(count=self._count, done=self._count >= 3, reward=float(self._count))

    @property
    def state(self) -> State:
        return self._state


class FutureObservation(Observation):
    """An agentenv-like answer from a server of a later protocol, with a field this client does not know."""

    event: str = "started"
    protocol: int = PROTOCOL + 1
    surprise: str = "new"


class FutureServer(Environment[CountAction, FutureObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, protocol: int = PROTOCOL + 1) -> None:
        super().__init__()
        self.protocol = protocol

    def reset(self, seed: Any = None, episode_id: Any = None, **kwargs: Any) -> FutureObservation:
        return FutureObservation(protocol=self.protocol)

    def step(self, action: CountAction, timeout_s: Any = None, **kwargs: Any) -> FutureObservation:
        return FutureObservation(protocol=self.protocol)

    @property
    def state(self) -> State:
        return State()


@pytest.fixture
def bare():
    server = ServerThread(create_fastapi_app(Counter, CountAction, CountObservation, max_concurrent_envs=1)).start()
    yield server
    server.stop()


def test_openenvs_own_client_plays_an_agentenv_episode(serve) -> None:
    server = serve(FAKE)
    with GenericEnvClient(base_url=server.url) as client:
        started = client.reset(task_id="echo", protocol=PROTOCOL)
        assert started.observation["event"] == "started" and started.observation["protocol"] == PROTOCOL
        assert "echo" in [t["name"] for t in started.observation["tools"]]
        tool = client.step({"op": "call", "tool": "echo", "args": {"text": "ping"}})
        assert tool.observation["text"] == "ping" and tool.done is False
        over = client.step({"op": "end_turn", "reply": "ping"})
        assert over.done is True and over.reward == 1.0
        assert over.observation["result"]["outcome"] == "scored"
        assert client.state()["step_count"] == 2


async def test_agentenvs_transport_drives_a_bare_openenv_server(bare) -> None:
    transport = Transport(bare.url.replace("http", "ws") + "/ws")
    try:
        assert (await transport.request("reset", {}))["observation"]["count"] == 0
        first = await transport.request("step", {"by": 2})
        assert first["observation"]["count"] == 2 and first["reward"] == 2.0 and first["done"] is False
        assert (await transport.request("step", {"by": 1}))["done"] is True
        assert (await transport.request("state"))["step_count"] == 2
        with pytest.raises(ErrorFrame) as invalid:
            await transport.request("step", {"by": "many"})
        assert invalid.value.code == "VALIDATION_ERROR" and transport.is_open  # OpenEnv's code; the session goes on
        second = Transport(bare.url.replace("http", "ws") + "/ws")
        with pytest.raises(ErrorFrame) as full:
            await second.request("reset", {})
        assert full.value.code == "CAPACITY_REACHED" and full.value.data["max_sessions"] == 1
        await second.close()
    finally:
        await transport.close()
    again = Transport(bare.url.replace("http", "ws") + "/ws")  # closing freed the one slot
    assert (await again.request("reset", {}))["observation"]["count"] == 0
    await again.close()


async def test_a_bare_openenv_server_is_not_taken_for_an_agentenv_server(bare) -> None:
    with pytest.raises(ProtocolMismatch, match="agentenv-server"):
        await asyncio.to_thread(probe, Shared(bare.url))  # no GET /agentenv: a server of protocol 1 or none
    session = Session(Shared(bare.url))
    with pytest.raises(ProtocolError, match="does not fit agentenv's protocol"):
        await session.start("echo")
    await session.close()


def _future(protocol: int) -> Any:
    import functools

    app = create_fastapi_app(functools.partial(FutureServer, protocol), CountAction, FutureObservation)
    return ServerThread(app).start()


async def test_a_server_of_a_newer_protocol_is_refused_naming_the_package_to_upgrade(monkeypatch) -> None:
    monkeypatch.delenv("AGENTENV_STRICT_WIRE")  # a newer peer's extra field is ignored outside the tests...
    server = _future(PROTOCOL + 1)
    session = Session(Shared(server.url))
    try:
        with pytest.raises(ProtocolMismatch) as refused:
            await session.start("echo")
    finally:
        await session.close()
        server.stop()
    assert refused.value.server == PROTOCOL + 1 and refused.value.client == PROTOCOL
    assert "pip install -U agentenv-core" in str(refused.value)


async def test_unknown_fields_are_an_error_in_strict_mode() -> None:
    server = _future(PROTOCOL)  # ...and an error in strict mode (the tests' own)
    session = Session(Shared(server.url))
    try:
        with pytest.raises(ProtocolError, match="surprise"):
            await session.start("echo")
    finally:
        await session.close()
        server.stop()


def test_the_readme_shows_the_fault_table_as_core_defines_it() -> None:
    from agentenv.faults import table_markdown

    from tests.support import ROOT

    readme = (ROOT / "README.md").read_text()
    shown = readme.split("<!-- fault-table:start -->")[1].split("<!-- fault-table:end -->")[0].strip()
    assert shown == table_markdown()
