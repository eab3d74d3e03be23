"""The session layer for synchronous code (TRL's environments): the same objects, blocking.

Coroutines run on one background event loop per process (a daemon thread), so sessions opened from
different threads share it and a blocking caller never runs a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from agentenv.client.rollout import Rollout
from agentenv.client.session import Session
from agentenv.client.settings import Shared

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


class _Blocking:
    """Forwards every public member to ``_target``; a coroutine method blocks until its coroutine is done."""

    _target: Any

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # private members stay the target's (and copy/pickle probes get no forward)
        value = getattr(self._target, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return run_sync(value(*args, **kwargs))

        return blocking


class SyncSession(_Blocking):
    """``Session`` for synchronous code: every member of ``session``, its coroutines blocking (``start``, ``call``,
    ``end_turn``, ``finish``...); ``rollout`` gives a ``SyncRollout``."""

    def __init__(self, shared: Shared) -> None:
        self.session = self._target = Session(shared)

    def rollout(
        self, task_id: str, *, attempts: int = 1, budget: float | None = None, step: int | None = None
    ) -> SyncRollout:
        """See ``Session.rollout``."""
        return SyncRollout(self.session.rollout(task_id, attempts=attempts, budget=budget, step=step))

    def close(self) -> None:
        """See ``Session.close`` (a loop already gone leaves nothing to close)."""
        with contextlib.suppress(RuntimeError):
            run_sync(self.session.close(), timeout=30)


class SyncRollout(_Blocking):
    """``Rollout`` for synchronous code: every member of ``rollout``, its coroutines blocking (``start``, ``call``,
    ``end_turn``, ``conclude``, ``finish``...)."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = self._target = rollout
