"""``Rollout``: one task played to a verdict, the fault policy applied the one way every integration shares.

A rollout is one or more **attempts**, each an episode of the task on the session. The policy plays an
attempt through ``call`` and ``end_turn``; ``conclude()`` ends the turns it left open with an empty
reply (the policy's doing: scored) and returns the result. An attempt the env or the server loses
(``EpisodeLost``; see ``agentenv.faults``) is replayed on a new episode by ``play`` while attempts are
left and the time budget allows, then ``RolloutFailed`` is raised. ``record`` is what every trainer
reports: attempts, each failure, model seconds, env seconds, the score of each step.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

from agentenv.client.settings import Shared
from agentenv.errors import AgentEnvError, EpisodeFailed, EpisodeLost, RolloutFailed
from agentenv.logs import warn_once
from agentenv.wire import Attempt, EpisodeResult, Failure, Started, ToolAnswer, TurnAnswer

__all__ = ["Rollout", "RolloutRecord"]

log = logging.getLogger("agentenv.rollout")
T = TypeVar("T")


@dataclass
class RolloutRecord:
    """What a rollout did: ``attempts`` started, each lost attempt's ``failures``, the seconds the model
    and the env took (all attempts), and the final ``result`` (its ``scores`` by step id)."""

    task_id: str
    attempts: int = 0
    failures: list[Failure] = field(default_factory=list)
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    result: EpisodeResult | None = None

    @property
    def scores(self) -> dict[str, float | None]:
        """The final result's score per step (empty before a result)."""
        return dict(self.result.scores) if self.result is not None else {}


class SessionLike(Protocol):
    """What a rollout needs of ``agentenv.client.session.Session`` (which makes rollouts: no import back to it)."""

    shared: Shared
    started: Started | None
    result: EpisodeResult | None
    env_seconds: float

    async def start(self, task_id: str, *, attempt: Attempt | None = None) -> Started: ...
    async def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer: ...
    async def end_turn(self, reply: str) -> TurnAnswer: ...
    async def finish(self) -> EpisodeResult: ...


class Rollout:
    """One task played to a verdict on ``session`` (create it with ``Session.rollout``).

    Play an attempt with ``start``, ``call``, ``end_turn`` and ``conclude``, or hand ``play`` a function
    that plays one attempt: it replays lost ones. After a loss, ``call`` and ``end_turn`` raise the same
    ``EpisodeLost`` again (the model cannot go on with a lost episode).
    """

    def __init__(
        self,
        session: SessionLike,
        task_id: str,
        *,
        attempts: int = 1,
        budget: float | None = None,
        step: int | None = None,
    ) -> None:
        if int(attempts) < 1:
            raise AgentEnvError(f"attempts={attempts!r}: give 1 or more")
        self.session = session
        self.task_id = task_id
        self.attempts = int(attempts)
        self.budget = float(budget) if budget is not None else session.shared.reset_timeout
        self.record = RolloutRecord(task_id)
        self.id = uuid.uuid4().hex  # every attempt's episode carries it, so the server's records tie them together
        self.step = step
        self.started: Started | None = None
        self.lost: EpisodeLost | None = None
        self._began: float | None = None
        self._env_base = session.env_seconds

    # -- one attempt -----------------------------------------------------------------------------

    async def start(self) -> Started:
        """Start an attempt (the first, or a replay) on a new episode; returns before its deploy ends."""
        if self._began is None:
            self._began = time.monotonic()
        self.started, self.lost = None, None
        self.record.attempts += 1
        self.record.result = None
        try:
            self.started = await self.session.start(self.task_id, attempt=self._attempt())
        except EpisodeLost as exc:
            self._lose(exc)
            raise
        finally:
            self._sync_seconds()
        return self.started

    def _attempt(self) -> Attempt:
        earlier = [asdict(failure) for failure in self.record.failures]
        client = self.session.shared.client
        return Attempt(rollout=self.id, number=self.record.attempts, earlier=earlier, client=client, step=self.step)

    @property
    def result(self) -> EpisodeResult | None:
        """The attempt's result once it is over (scored, unscored, or failed when lost), else None."""
        if self.lost is not None:
            return self._lost_result(self.lost)
        return self.session.result if self.started is not None else None

    async def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """Call a tool on the attempt's episode (policy faults come back as ``error`` answers, scored)."""
        self._playing(tool)
        try:
            return await self.session.call(tool, args)
        except EpisodeLost as exc:
            raise self._lose(exc) from None
        finally:
            self._sync_seconds()

    async def end_turn(self, reply: str) -> TurnAnswer:
        """End the open turn with ``reply``: the next prompt, or the result after the last turn."""
        self._playing("end_turn")
        try:
            return await self.session.end_turn(reply)
        except EpisodeLost as exc:
            raise self._lose(exc) from None
        finally:
            self._sync_seconds()

    async def conclude(self) -> EpisodeResult:
        """End the turns the policy left open with an empty reply (scored: the policy's doing) and return the
        attempt's result; a lost attempt returns its ``failed`` result. Never raises ``EpisodeLost``."""
        if self.started is None and self.lost is None:
            raise AgentEnvError("conclude() before start(): start an attempt first")
        if self.lost is None and self.started is not None:
            try:
                for _ in range(self.started.turns):
                    if self.session.result is not None or (await self.session.end_turn("")).done:
                        break
            except EpisodeLost as exc:
                self._lose(exc)
            finally:
                self._sync_seconds()
        result = self.result
        if result is None:  # the server kept the episode open after its last turn: it cannot be scored
            self._lose(
                EpisodeLost(
                    f"{self.session.shared.url} did not end task {self.task_id!r} after its last turn",
                    failure=Failure("protocol", "session", "the episode did not end after its last turn"),
                )
            )
            result = self.result
        assert result is not None
        self.record.result = result
        return result

    async def finish(self) -> EpisodeResult:
        """End the attempt now, however it stands, and return its result: when over, the result (``failed`` when
        lost); when turns are left, the episode is torn down ``unscored``; when it never started, ``failed`` with the
        start's failure (or ``unscored``, closed first). Never raises ``EpisodeLost``."""
        result = self.result
        if result is None and self.started is not None:
            try:
                result = await self.session.finish()
            except EpisodeLost as exc:
                self._lose(exc)
                result = self.result
            finally:
                self._sync_seconds()
        if result is None and self.record.failures:
            last = self.record.failures[-1]
            result = EpisodeResult(task_id=self.task_id, outcome="failed", failure=last, reason=last.message)
        if result is None:
            result = EpisodeResult(task_id=self.task_id, outcome="unscored", reason="closed before its episode started")
        self.record.result = result
        return result

    def _playing(self, what: str) -> None:
        if self.lost is not None:
            raise self.lost
        if self.started is None:
            raise AgentEnvError(f"{what} before start(): start an attempt first")

    def _lose(self, exc: EpisodeLost) -> EpisodeLost:
        if self.lost is None:
            self.lost = exc
            self.record.failures.append(exc.failure)
        return self.lost

    def _lost_result(self, exc: EpisodeLost) -> EpisodeResult:
        if isinstance(exc, EpisodeFailed) and exc.result is not None:
            return exc.result  # the server's own account, kept whole
        turns = self.started.turns if self.started is not None else 0
        return EpisodeResult(task_id=self.task_id, outcome="failed", failure=exc.failure, reason=str(exc), turns=turns)

    def _sync_seconds(self) -> None:
        self.record.env_seconds = self.session.env_seconds - self._env_base

    # -- model time --------------------------------------------------------------------------------

    def add_model_seconds(self, seconds: float) -> None:
        """Count ``seconds`` of the policy's generation (the trainer knows them; the session does not)."""
        self.record.model_seconds += float(seconds)

    @contextmanager
    def model_time(self) -> Iterator[None]:
        """Count the time spent in the ``with`` block as model time."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.add_model_seconds(time.monotonic() - began)

    # -- replays -----------------------------------------------------------------------------------

    def can_replay(self) -> bool:
        """Whether another attempt may start: the last was lost to a replayable fault, attempts are left,
        and the budget has not run out since the rollout began."""
        if self.lost is None or not self.lost.failure.replayable:
            return False
        if self.record.attempts >= self.attempts:
            return False
        return self._began is None or time.monotonic() - self._began < self.budget

    async def play(self, attempt: Callable[[Started], Awaitable[T]]) -> tuple[T, EpisodeResult]:
        """Play attempts of the task until one is not lost: ``attempt(started)`` plays the policy's part.

        Returns the value of the attempt that was not lost and its result (``scored`` or ``unscored``).
        Raises ``RolloutFailed`` once no replay may start, and any non-``EpisodeLost`` error at once.
        """
        while True:
            try:
                started = await self.start()
                value = await attempt(started)
            except EpisodeLost as exc:
                if exc is not self.lost:
                    raise  # not this rollout's episode
            result = await self.conclude()
            if self.lost is None:
                return value, result
            if not self.can_replay():
                raise self._failed() from self.lost
            warn_once(
                log,
                f"replay:{self.session.shared.url}",
                "task %r: attempt %d of %d was lost (%s); replaying it on a new episode",
                self.task_id,
                self.record.attempts,
                self.attempts,
                self.lost,
            )

    def _failed(self) -> RolloutFailed:
        failures = self.record.failures
        last = failures[-1]
        why = ""
        if self.record.attempts < self.attempts and self.lost is not None and self.lost.failure.replayable:
            limit = (
                f"reset_timeout={self.budget:g} s"
                if self.budget == self.session.shared.reset_timeout
                else f"budget={self.budget:g} s"
            )
            why = f" and no replay starts once {limit} has passed since it began"
        elif self.lost is not None and not self.lost.failure.replayable:
            why = f" ({last.kind} is not replayed: see agentenv.faults)"
        return RolloutFailed(
            f"task {self.task_id!r}: the env failed {len(failures)} attempt(s) of {self.attempts}{why}; last: "
            f"{last.kind} at {last.stage}: {last.message}",
            task_id=self.task_id,
            failures=failures,
        )
