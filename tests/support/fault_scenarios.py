"""One scenario per row of the fault table (``agentenv.faults.RULES``), played through every integration.

Each scenario is a policy's part on the fake bundle (the calls of turn 1 and its reply) against a server
that misbehaves for real: the fake env's failures, a server started with tight limits, an ``agentenv
serve`` process killed or stopped mid-rollout, a broken server that corrupts a frame. The expected outcome
is the table's, never the integration's: the TRL and verl tests assert ``faults.rule(kind).outcome``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.faults import RULES

from tests.support import FAKE, ServeProcess, with_ops

__all__ = ["SCENARIOS", "Scenario", "ScenarioServer", "scenario_server"]


@dataclass(frozen=True)
class Scenario:
    """``calls``: the policy's calls on turn 1; ``reply``: its reply (None leaves the turn open).

    ``app``: the server's ``build_app`` options. ``process``: serve with a real ``agentenv serve``. ``at_start``:
    what happens before the rollout starts (``dead``: the server is gone; ``full``: another session holds its
    one slot; ``stopped``: the server process is stopped (SIGSTOP), so the kernel takes the connection and nothing
    answers the handshake). ``midway``: what happens after the episode started, before the first call (``kill``:
    SIGKILL, ``stop``: SIGTERM, ``idle``: the policy thinks past the server's idle_timeout). ``broken``: the server
    corrupts its first answer to a tool call. ``nofile``: the server's limit on open files (``at_start="leak"``:
    another session's env leaks descriptors until the server has too few left for a new session: the fake bundle
    with the ``ops`` env, ``tests.support.bundles.with_ops``).
    """

    kind: str
    task: str = "echo"
    calls: tuple[tuple[str, dict[str, Any]], ...] = (("echo", {"text": "ping"}),)
    reply: str | None = "ping"
    app: dict[str, Any] = field(default_factory=dict)
    process: bool = False
    at_start: str | None = None
    midway: str | None = None
    broken: bool = False
    nofile: int | None = None


ECHO = ("echo", {"text": "ping"})

SCENARIOS: dict[str, Scenario] = {
    s.kind: s
    for s in (
        Scenario("unknown_tool", calls=(("no_such_tool", {}), ECHO)),
        Scenario("invalid_arguments", calls=(("add", {"a": "one", "b": 2}), ECHO)),
        Scenario("oversized_call", calls=(("echo", {"text": "x" * 30_000}), ECHO), app={"max_message_bytes": 20_000}),
        Scenario("tool_error", calls=(("fail", {}), ECHO)),
        Scenario("wrong_answer", reply="pong"),
        Scenario("no_tool_call", calls=(), reply="ping"),
        Scenario("no_answer", reply=None),
        Scenario("deploy", task="deploy-fails"),
        Scenario("crash", calls=(("crash", {}),)),
        Scenario("deadline", calls=(("hang", {"seconds": 30}),), app={"tool_timeout": 1}),
        Scenario("verifier", task="broken-verifier", calls=(), reply="anything"),
        Scenario("unreachable", at_start="dead", process=True),
        Scenario("restarting", midway="stop", process=True),
        Scenario("capacity", at_start="full", app={"max_concurrent_envs": 1}),
        Scenario("out_of_resources", at_start="leak", process=True, nofile=256, app={"max_concurrent_envs": 4}),
        Scenario("overloaded", at_start="stopped", process=True),
        Scenario("connection_lost", midway="kill", process=True),
        Scenario("idle", midway="idle", app={"idle_timeout": 0.5}),
        Scenario("protocol", broken=True),
    )
}

assert set(SCENARIOS) == {r.kind for r in RULES}, "every row of the fault table has a scenario"


class _Corrupt:
    """ASGI middleware of a broken server: its first answer to a tool call is not a frame of agentenv's protocol."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.done = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        steps = 0

        async def counting_receive() -> Any:
            nonlocal steps
            message = await receive()
            if message["type"] == "websocket.receive":
                frame = json.loads(message.get("text") or "{}")
                steps += frame.get("type") == "step" and frame.get("data", {}).get("op") == "call"
            return message

        async def corrupting_send(message: Any) -> None:
            if message["type"] == "websocket.send" and steps and not self.done:
                self.done = True
                message = {**message, "text": json.dumps({"type": "observation", "data": {"observation": {
                    "event": "tool", "text": 42}}})}  # fmt: skip
            await send(message)

        await self.app(scope, counting_receive, corrupting_send)


class ScenarioServer:
    """The server of one scenario: ``url``, and ``before_start`` / ``midway`` to run its part."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.process: ServeProcess | None = None
        self.thread: Any = None
        self._holder: SyncSession | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> ScenarioServer:
        app = dict(self.scenario.app)
        if self.scenario.process:
            args = [f"--{k.replace('_', '-')}={v}" for k, v in app.items()]
            bundle = FAKE
            if self.scenario.at_start == "leak":
                self._folder = tempfile.TemporaryDirectory()
                bundle = with_ops(Path(self._folder.name))
            self.process = ServeProcess(bundle, *args, nofile=self.scenario.nofile).start()
            return self
        from agentenv_server import ServerThread, build_app

        built = build_app(FAKE, **{"tool_timeout": 5, "reset_timeout": 5, **app})
        if self.scenario.broken:
            built.add_middleware(_Corrupt)
        self.thread = ServerThread(built).start()
        return self

    @property
    def url(self) -> str:
        return self.process.url if self.process is not None else self.thread.url

    def before_start(self) -> None:
        """Run the scenario's part before the rollout starts."""
        if self.scenario.at_start == "dead":
            assert self.process is not None
            self.process.kill()
        elif self.scenario.at_start == "stopped":
            assert self.process is not None and self.process.proc is not None
            self.process.proc.send_signal(signal.SIGSTOP)
        elif self.scenario.at_start == "full":
            # waits out the slot's last user: the client's probe session may still be tearing down on the server
            self._holder = SyncSession(Shared(self.url, waits_for_server=True, reset_timeout=30))
            self._holder.start("echo")
        elif self.scenario.at_start == "leak":  # fewer descriptors left than the server keeps in reserve
            self._holder = SyncSession(Shared(self.url))
            self._holder.start("ops")
            self._holder.call("hold_fds", {"leave": 40})

    def midway(self) -> None:
        """Run the scenario's part after the episode started, before the policy's first call."""
        how = self.scenario.midway
        if how == "kill":
            assert self.process is not None
            self.process.kill()
        elif how == "stop":
            assert self.process is not None
            self.process.terminate()
        elif how == "idle":
            time.sleep(self.scenario.app["idle_timeout"] * 4)

    def stop(self) -> None:
        if self.process is not None and self.process.proc is not None and self.process.proc.poll() is None:
            self.process.proc.send_signal(signal.SIGCONT)  # a stopped server cannot shut down
        if self._holder is not None:
            self._holder.close()
        if self.process is not None and self.process.proc is not None and self.process.proc.poll() is None:
            self.process.terminate()
        if self.thread is not None:
            self.thread.stop()
        if self._folder is not None:
            self._folder.cleanup()


@contextlib.contextmanager
def scenario_server(scenario: Scenario) -> Iterator[ScenarioServer]:
    """The scenario's server, stopped at the end."""
    server = ScenarioServer(scenario).start()
    try:
        yield server
    finally:
        server.stop()
