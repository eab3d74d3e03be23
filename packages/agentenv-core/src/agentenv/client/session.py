"""The session layer: the one client every integration uses to play episodes on an agentenv server.

``Session`` (async) holds one OpenEnv session (``agentenv.client.transport``) and plays one episode at a time
on it, with client-side deadlines; ``Session.rollout`` returns a ``Rollout`` (``agentenv.client.rollout``),
which replays lost episodes. Every failure is typed by the fault table (``agentenv.faults``): the
env's and the server's as ``EpisodeLost`` subclasses carrying a ``Failure``, the policy's answered as
tool answers marked ``error`` (scored). ``agentenv.client.sync`` has the blocking versions, ``agentenv.client.taskapi``
the Task API. This module imports nothing of the engine (bundle, episode, verifiers, plugins).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from agentenv import wire
from agentenv.client.lost import from_transport, lost_error, mismatch, not_run, refused
from agentenv.client.rollout import Rollout
from agentenv.client.settings import Shared
from agentenv.client.transport import NOT_JSON, Closed, Connection, ErrorFrame, Transport, TransportError
from agentenv.errors import (
    AgentEnvError,
    EpisodeFailed,
    EpisodeLost,
    ProtocolError,
    ToolDeadline,
)
from agentenv.faults import RULES
from agentenv.logs import warn_once
from agentenv.wire import Code, EpisodeResult, Event, Failure, Op, Purpose, Started, Tool, ToolAnswer, TurnAnswer

__all__ = ["Session", "Shared", "Started", "ToolAnswer", "TurnAnswer"]

log = logging.getLogger("agentenv.session")

EPISODE_OVER = "the episode is over"
# failure kinds a session with waits_for_server waits out at the start of an episode (the fault table's ``wait``)
_WAITED = frozenset(r.kind for r in RULES if r.wait)


# ---------------------------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------------------------


class Session:
    """One OpenEnv session on an agentenv server, playing one episode at a time (async).

    ``start`` opens the session if needed and starts a task; ``call`` and ``end_turn`` play it;
    ``finish`` ends it early; ``close`` ends the session. ``env_seconds`` counts the time spent
    waiting on the server (opening, deploying, tools, ending turns, scoring).
    """

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._transport: Connection | None = None
        self.started: Started | None = None
        self.result: EpisodeResult | None = None
        self.deployed = False
        self.env_seconds = 0.0
        self.episodes = 0
        self._limit = 0  # the largest step the server takes (it says so when an episode starts)

    def rollout(
        self, task_id: str, *, attempts: int = 1, budget: float | None = None, step: int | None = None
    ) -> Rollout:
        """A ``Rollout`` of ``task_id`` on this session: up to ``attempts`` episodes, no replay starting
        once ``budget`` seconds (default: ``reset_timeout``) have passed since it began; ``step`` is the trainer's
        step, for the server's records."""
        return Rollout(self, task_id, attempts=attempts, budget=budget, step=step)

    # -- the connection --------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the session's connection is up (the server may still close it before the next request)."""
        return self._transport is not None and self._transport.is_open

    def _connection(self) -> Connection:
        if self._transport is None and self.shared.here is not None:
            self._transport = self.shared.here.connect()
        elif self._transport is None:
            self._transport = Transport(
                self.shared.ws_url,
                headers=self.shared.headers(),
                open_timeout=self.shared.reset_timeout,
                use_proxy=not self.shared.loopback,
            )
        return self._transport

    def _drop(self) -> None:
        """Forget the connection without a goodbye (a request on it was abandoned or failed)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()

    async def _request(
        self, kind: str, data: Mapping[str, Any], seconds: float, what: str, stage: str
    ) -> wire.Observation:
        transport = self._connection()
        began = time.monotonic()
        try:
            async with asyncio.timeout(seconds):
                answer = await transport.request(kind, data, limit=self._limit if kind == "step" else 0)
        except TimeoutError:
            self._drop()
            raise lost_error(
                "deadline",
                "client",
                f"{what} got no answer from {self.shared.url} within {seconds:g} s; "
                "the episode is lost (not the policy's doing: leave it out of training)",
                ToolDeadline,
            ) from None
        except ErrorFrame as exc:
            if exc.code in (Code.TOO_LARGE, NOT_JSON) and transport.is_open:
                raise  # the policy's doing; the caller answers it and the session goes on
            self._drop()
            raise from_transport(exc, self.shared, stage) from None
        except TransportError as exc:
            self._drop()
            raise from_transport(exc, self.shared, stage) from None
        finally:
            self.env_seconds += time.monotonic() - began
        observation = answer.get("observation")
        try:
            return wire.read(wire.Observation, observation, f"the answer of {self.shared.url} to {what}")
        except wire.WireError as exc:
            self._drop()
            raise lost_error("protocol", stage, str(exc), ProtocolError) from None

    # -- episodes ----------------------------------------------------------------------------------

    async def start(
        self,
        task_id: str | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        purpose: Purpose = "play",
        attempt: wire.Attempt | None = None,
    ) -> Started:
        """Start a task by id, or by split and index; returns before the deploy ends. ``attempt`` says which attempt
        of which rollout it is (``Rollout`` gives it; the server records it).

        A previous episode on this session is ended first. With ``waits_for_server``, a server that
        refuses connections, restarts or is at capacity is waited out within ``reset_timeout``.
        """
        if task_id is None and (split is None or index is None):
            raise AgentEnvError("start() needs task_id, or split and index")
        reset = wire.Reset(task_id=task_id, split=split, index=index, purpose=purpose, attempt=attempt)
        data = reset.model_dump(exclude_none=True)
        began = time.monotonic()
        deadline = began + self.shared.reset_timeout
        delay = 0.05
        self.started, self.result, self.deployed = None, None, False
        if self._transport is not None and not self._transport.is_open:
            self._drop()  # the server closed it since the last episode (a restart, the idle reaper)
        while True:
            reused = self._transport is not None
            try:
                left = max(0.0, deadline - time.monotonic())
                self._connection().open_timeout = max(left, 1.0)  # a handshake may take what is left of reset_timeout
                obs = await self._request("reset", data, left + self.shared.margin, "a reset", "session")
                break
            except EpisodeLost as exc:
                if reused and exc.failure.kind in ("connection_lost", "restarting", "idle"):
                    continue  # the connection of the previous episode was gone; this episode never started
                waits = self.shared.waits_for_server and exc.failure.kind in _WAITED
                if not waits or time.monotonic() >= deadline:
                    if waits:
                        waited = (
                            f" (waited {time.monotonic() - began:.0f} s, reset_timeout={self.shared.reset_timeout:g})"
                        )
                        raise type(exc)(f"{exc}{waited}", failure=exc.failure) from None
                    raise
                warn_once(
                    log,
                    f"wait:{self.shared.url}",
                    "waiting for the agentenv server at %s (up to reset_timeout=%g s): %s",
                    self.shared.url,
                    self.shared.reset_timeout,
                    exc,
                )
                slept = time.monotonic()
                await asyncio.sleep(min(delay, max(0.0, deadline - slept)))  # the last try comes at the deadline
                self.env_seconds += time.monotonic() - slept  # waiting for the server is env time
                delay = min(delay * 2, 2.0)
        if obs.event == Event.ERROR and obs.problem is not None:
            raise refused(obs.problem, self.shared)
        if obs.protocol != wire.PROTOCOL:
            self._drop()
            raise mismatch(self.shared, obs.protocol)
        if obs.event != Event.STARTED:
            self._drop()
            why = f"{self.shared.url} answered a reset with {obs.event!r}; is it an agentenv server?"
            raise lost_error("protocol", "session", why, ProtocolError)
        self.episodes += 1
        self._limit = obs.max_message_bytes
        self.started = Started(
            episode_id=obs.episode_id,
            task_id=obs.task_id,
            split=obs.split,
            index=obs.index,
            system=obs.system,
            prompt=obs.prompt,
            turns=obs.turns,
            tools=[Tool.from_dict(t) for t in obs.tools],
            toolset_key=obs.toolset_key,
        )
        self._take(obs)
        return self.started

    def _take(self, obs: wire.Observation) -> EpisodeResult | None:
        if obs.result is not None:
            self.result = EpisodeResult.from_dict(obs.result)
        self.deployed = self.deployed or obs.deployed
        return self.result

    def _failed(self, result: EpisodeResult) -> EpisodeFailed:
        failure = result.failure or Failure("crash", "session", "the server ended the episode failed without a reason")
        episode = self.started.episode_id if self.started else "?"
        return EpisodeFailed(
            f"the env failed episode {episode} of task {result.task_id!r} ({failure.kind} during {failure.stage}): "
            f"{failure.message}. It is not the policy's doing: replay it or leave it out, never train on it as a zero",
            failure=failure,
            result=result,
        )

    async def _step(self, action: wire.Action, seconds: float, what: str) -> wire.Observation | ErrorFrame:
        """One step; the ``ErrorFrame`` when it was not sent or the server dropped it (too large, or holding a number
        JSON cannot carry: the policy's doing)."""
        if self.started is None:
            raise AgentEnvError(f"{what} before start(): start a task first")
        closed = self._transport.closed() if self._transport is not None else Closed(1006, "")
        if closed is not None:  # the server ended the session since the last step (a restart, the idle reaper)
            self._drop()
            raise from_transport(closed, self.shared, "session")
        try:
            obs = await self._request("step", action.model_dump(), seconds + self.shared.margin, what, "session")
        except ErrorFrame as dropped:
            return dropped  # MESSAGE_TOO_LARGE or NOT_STANDARD_JSON: the frame was dropped and the session goes on
        if obs.event == Event.ERROR and obs.problem is not None:
            raise refused(obs.problem, self.shared)
        return obs

    def _tool_deadline(self) -> float:
        # the first call waits for the deploy, which has its own (reset) deadline
        return self.shared.tool_timeout + (0.0 if self.deployed else self.shared.reset_timeout)

    async def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """Call a tool. Policy faults come back as answers with ``error`` set; env and server faults raise
        ``EpisodeLost`` (``EpisodeFailed``, ``ToolDeadline``, ``ServerUnavailable``...)."""
        if self.result is not None:
            if self.result.outcome == "failed":
                raise self._failed(self.result)
            return ToolAnswer(f"error: {EPISODE_OVER}; {tool} was not called", error=True)
        action = wire.Action(op=Op.CALL, tool=tool, args=args)
        obs = await self._step(action, self._tool_deadline(), f"tool {tool!r}")
        if isinstance(obs, ErrorFrame):
            return ToolAnswer(not_run(tool, obs), error=True)
        result = self._take(obs)
        if result is not None:
            if result.outcome == "failed":
                raise self._failed(result)
            raise lost_error(
                "protocol",
                "session",
                f"{self.shared.url} ended the episode on a tool call without a failure",
                ProtocolError,
            )
        return ToolAnswer(text=obs.text, error=obs.error)

    async def end_turn(self, reply: str) -> TurnAnswer:
        """End the open turn with ``reply``; returns the next prompt, or the result when it was the last turn.

        Waits up to the reset deadline (the last turn runs the verifiers). A reply larger than the server
        accepts is replaced by an empty one (the policy's doing: scored). Raises ``EpisodeFailed`` when
        the env failed.
        """
        if self.result is not None:
            if self.result.outcome == "failed":
                raise self._failed(self.result)
            return TurnAnswer(prompt=None, result=self.result)
        seconds = self.shared.reset_timeout + (0.0 if self.deployed else self.shared.reset_timeout)
        obs = await self._step(wire.Action(op=Op.END_TURN, reply=reply), seconds, "end_turn")
        if isinstance(obs, ErrorFrame):
            warn_once(
                log,
                f"too-large:{self.shared.url}",
                "a reply was larger than %s accepts; its turn was ended with an empty reply (scored)",
                self.shared.url,
            )
            obs = await self._step(wire.Action(op=Op.END_TURN, reply=""), seconds, "end_turn")
            if isinstance(obs, ErrorFrame):
                raise lost_error(
                    "protocol", "session", f"{self.shared.url} refused an empty end_turn as too large", ProtocolError
                )
        result = self._take(obs)
        if result is not None:
            if result.outcome == "failed":
                raise self._failed(result)
            return TurnAnswer(prompt=None, result=result)
        return TurnAnswer(prompt=obs.prompt, result=None)

    async def finish(self) -> EpisodeResult:
        """End the episode now (torn down at once); unscored when turns were left."""
        if self.result is None:
            obs = await self._step(wire.Action(op=Op.FINISH), self.shared.reset_timeout, "finish")
            if isinstance(obs, ErrorFrame) or self._take(obs) is None:
                raise lost_error(
                    "protocol", "session", f"{self.shared.url} did not return a result for finish", ProtocolError
                )
        assert self.result is not None
        return self.result

    async def close(self) -> None:
        """End the session (the server tears down an episode still running)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()
        self.started = None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
