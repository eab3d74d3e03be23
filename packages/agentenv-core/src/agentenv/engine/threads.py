"""The bounded pool that runs an episode's blocking work: sync tools, deploys, teardowns and verifiers.

Async envs run on the event loop and cost no thread; sync work shares this pool, so a server's threads
do not grow with its sessions. Its threads are daemons: a call whose awaiting task is cancelled (a
deadline, a client gone, a shutdown) is **abandoned**: the thread runs on until the function returns,
its result is dropped, and nothing (not even interpreter exit) waits for it. The pool counts abandoned
calls still running and warns when they hold most of its threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agentenv.errors import AgentEnvError

__all__ = ["DEFAULT_TOOL_THREADS", "TOOL_THREADS_VAR", "ToolThreads", "default_pool", "pool_size"]

log = logging.getLogger("agentenv.threads")

T = TypeVar("T")

TOOL_THREADS_VAR = "AGENTENV_TOOL_THREADS"
DEFAULT_TOOL_THREADS = 32


class _Call:
    __slots__ = ("abandoned", "args", "context", "counted", "fn", "future", "loop", "running")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        self.fn, self.args, self.future = fn, args, future
        self.loop = future.get_loop()
        self.context = contextvars.copy_context()
        self.abandoned = self.running = self.counted = False


class ToolThreads:
    """At most ``size`` daemon threads, started as needed, running blocking calls for the event loop."""

    def __init__(self, size: int, *, name: str = "agentenv-tool") -> None:
        if size < 1:
            raise AgentEnvError(f"tool threads: {size} is not a pool size; give at least 1")
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a call
        self.busy = 0
        self.abandoned_running = 0
        self._warned_at = 0

    @property
    def threads(self) -> int:
        """Threads started so far (never more than ``size``)."""
        return self._threads

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread; cancelling the awaiting task abandons the call."""
        call = _Call(fn, args, asyncio.get_running_loop().create_future())
        with self._lock:
            self._queue.put(call)
            if self._threads < self.size and self._queue.qsize() > self._idle:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
        try:
            return await call.future
        except asyncio.CancelledError:
            self._abandon(call)
            raise

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            call.abandoned = True  # not started yet: skipped; running: its result is dropped
            if not call.running:
                return
            call.counted = True
            self.abandoned_running += 1
            stuck = self.abandoned_running
            warn = stuck >= max(1, self.size // 2) and stuck > self._warned_at
            if warn:
                self._warned_at = stuck
        if warn:
            log.warning(
                "%d of the %d tool threads are held by calls abandoned past their deadline (sync tools that do not "
                "return); new sync calls wait for a free thread. Fix the tools, or raise the pool size "
                "(--tool-threads, build_app(tool_threads=...), $%s)",
                stuck,
                self.size,
                TOOL_THREADS_VAR,
            )

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            call = self._queue.get()
            with self._lock:
                self._idle -= 1
                if call.abandoned:
                    continue
                call.running = True
                self.busy += 1
            try:
                value: Any = call.context.run(call.fn, *call.args)
                error: BaseException | None = None
            except BaseException as exc:  # delivered to the awaiting task
                value, error = None, exc
            with self._lock:
                self.busy -= 1
                call.running = False
                if call.counted:
                    self.abandoned_running -= 1
                    if self.abandoned_running < self._warned_at:
                        self._warned_at = self.abandoned_running
                abandoned = call.abandoned
            if not abandoned:
                try:
                    call.loop.call_soon_threadsafe(_deliver, call, value, error)
                except RuntimeError:  # the loop is closed: nobody waits for this any more
                    pass


def _deliver(call: _Call, value: Any, error: BaseException | None) -> None:
    future = call.future
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


_default: ToolThreads | None = None
_default_lock = threading.Lock()


def pool_size(value: int | None = None) -> int:
    """``value``, else ``$AGENTENV_TOOL_THREADS``, else 32; refuses anything but a whole number from 1."""
    if value is not None:
        if value < 1:
            raise AgentEnvError(f"tool_threads={value}: give at least 1 thread")
        return value
    raw = os.environ.get(TOOL_THREADS_VAR, "")
    if not raw:
        return DEFAULT_TOOL_THREADS
    if not raw.isdigit() or int(raw) < 1:
        raise AgentEnvError(f"${TOOL_THREADS_VAR}={raw!r}: set it to a whole number of threads, at least 1")
    return int(raw)


def default_pool() -> ToolThreads:
    """The process's pool for episodes created without one (sized by ``$AGENTENV_TOOL_THREADS``, default 32)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ToolThreads(pool_size())
        return _default
