"""The session layer for synchronous code (TRL's environments): the same objects, blocking.

Coroutines run on one background event loop per process (a daemon thread), so sessions opened from
different threads share it and a blocking caller never runs a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from agentenv.client.rollout import Rollout, RolloutRecord
from agentenv.client.session import Session, Started, ToolAnswer, TurnAnswer
from agentenv.client.settings import Shared
from agentenv.wire import EpisodeResult, Purpose

__all__ = ["SyncRollout", "SyncSession", "run_sync"]

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentenv-session-loop", daemon=True).start()
            _loop = loop
        return _loop


def _forget_loop() -> None:  # a forked child must not use its parent's loop thread (it does not exist there)
    global _loop
    _loop = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loop)


def run_sync(coro: Awaitable[T], timeout: float | None = None) -> T:
    """Run ``coro`` on agentenv's background event loop and wait for it (from any thread but that loop's)."""
    loop = _background_loop()
    future = asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


class SyncSession:
    """``Session`` for synchronous code: the same methods, blocking."""

    def __init__(self, shared: Shared) -> None:
        self.session = Session(shared)

    @property
    def shared(self) -> Shared:
        """The connection settings."""
        return self.session.shared

    @property
    def started(self) -> Started | None:
        """The running episode's start, or None."""
        return self.session.started

    @property
    def result(self) -> EpisodeResult | None:
        """The episode's result once it is over."""
        return self.session.result

    @property
    def env_seconds(self) -> float:
        """Seconds spent waiting on the server."""
        return self.session.env_seconds

    def start(
        self,
        task_id: str | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        purpose: Purpose = "play",
    ) -> Started:
        """See ``Session.start``."""
        return run_sync(self.session.start(task_id, split=split, index=index, purpose=purpose))

    def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """See ``Session.call``."""
        return run_sync(self.session.call(tool, args))

    def end_turn(self, reply: str) -> TurnAnswer:
        """See ``Session.end_turn``."""
        return run_sync(self.session.end_turn(reply))

    def finish(self) -> EpisodeResult:
        """See ``Session.finish``."""
        return run_sync(self.session.finish())

    def rollout(
        self, task_id: str, *, attempts: int = 1, budget: float | None = None, step: int | None = None
    ) -> SyncRollout:
        """See ``Session.rollout``."""
        return SyncRollout(self.session.rollout(task_id, attempts=attempts, budget=budget, step=step))

    def close(self) -> None:
        """See ``Session.close``."""
        with contextlib.suppress(RuntimeError):
            run_sync(self.session.close(), timeout=30)


class SyncRollout:
    """``Rollout`` for synchronous code: ``start``, ``call``, ``end_turn``, ``conclude``, blocking."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout

    @property
    def started(self) -> Started | None:
        """The attempt's start."""
        return self.rollout.started

    @property
    def lost(self) -> Any:
        """The ``EpisodeLost`` that ended the attempt, or None."""
        return self.rollout.lost

    @property
    def result(self) -> EpisodeResult | None:
        """The attempt's result once it is over."""
        return self.rollout.result

    @property
    def record(self) -> RolloutRecord:
        """What the rollout did."""
        return self.rollout.record

    def start(self) -> Started:
        """See ``Rollout.start``."""
        return run_sync(self.rollout.start())

    def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """See ``Rollout.call``."""
        return run_sync(self.rollout.call(tool, args))

    def end_turn(self, reply: str) -> TurnAnswer:
        """See ``Rollout.end_turn``."""
        return run_sync(self.rollout.end_turn(reply))

    def conclude(self) -> EpisodeResult:
        """See ``Rollout.conclude``."""
        return run_sync(self.rollout.conclude())
