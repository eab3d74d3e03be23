"""Sessions kept open between rollouts: the WebSocket handshake and the server's session setup are paid once.

A trainer that makes a new loop object per rollout (verl does) would otherwise open a session per
rollout. ``pooled(shared)`` lends a ``Session`` of this event loop's pool and takes it back: a session
whose last episode ended cleanly is kept (its next ``start`` ends that episode on the server and starts
the next on the same connection); one that lost its episode or broke is closed. An idle pooled session
holds one of the server's ``max_concurrent_envs`` slots but no env (its episode is over), and the
server's idle reaper may close it: the next ``start`` then reconnects.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentenv.client.session import Session
from agentenv.client.settings import Shared

__all__ = ["SessionPool", "pooled"]


class SessionPool:
    """Open sessions to one server, for reuse on one event loop; at most ``size`` are kept idle."""

    def __init__(self, shared: Shared, *, size: int = 256) -> None:
        self.shared = shared
        self.size = size
        self._idle: list[Session] = []
        self.opened = 0  # sessions this pool created (the rest of its lends were reuses)

    def acquire(self) -> Session:
        """An idle session, or a new one (it connects at its first ``start``)."""
        if self._idle:
            return self._idle.pop()
        self.opened += 1
        return Session(self.shared)

    async def release(self, session: Session) -> None:
        """Take ``session`` back: kept when its episode ended cleanly and there is room, else closed."""
        reusable = (
            session.started is not None
            and session.result is not None
            and session.result.outcome != "failed"
            and session.connected
            and len(self._idle) < self.size
        )
        if reusable:
            self._idle.append(session)
        else:
            await session.close()

    async def close(self) -> None:
        """Close every idle session."""
        idle, self._idle = self._idle, []
        await asyncio.gather(*(s.close() for s in idle), return_exceptions=True)


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Shared, SessionPool]] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def pooled(shared: Shared) -> AsyncIterator[Session]:
    """Lend a session of this event loop's pool for ``shared`` (sessions are bound to the loop that opened them)."""
    pools = _pools.setdefault(asyncio.get_running_loop(), {})
    pool = pools.get(shared)
    if pool is None:
        pool = pools[shared] = SessionPool(shared)
    session = pool.acquire()
    try:
        yield session
    except BaseException:
        await session.close()  # whatever went wrong may have left the connection mid-request
        raise
    await pool.release(session)
