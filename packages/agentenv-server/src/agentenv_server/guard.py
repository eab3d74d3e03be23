"""ASGI middleware around OpenEnv's app: who may talk (``access``), admission, frame checks, idle reaping, and
connection ends.

Pure ASGI (added with ``app.add_middleware``) so that it sees WebSocket frames, which HTTP middleware cannot. Every
request is first checked by ``access.Access`` (the token, the page's ``Origin``, a public address without a token).
For every WebSocket it then:

- **admits** a session only while there is room: ``max_concurrent_envs`` sessions (a session counts until its
  episode is torn down) and the file descriptors to hold one (``limits.FdBudget``). Otherwise the client gets a
  ``CAPACITY_REACHED`` or ``OUT_OF_RESOURCES`` error frame, then close code 1000, before anything is created
  (OpenEnv's own shape for a full server);
- **reads the client's frames all the time**, not only when OpenEnv's loop asks for the next one, so a connection
  that ends while a call runs is seen at once: the call is cancelled (an async tool) or abandoned (a sync tool, left
  to finish on its pool thread), the episode fails, and its slot is given back as soon as it is torn down. A frame's
  size is checked as it arrives: one over ``max_message_bytes`` is not kept (its error frame is), and the frames a
  client sends ahead of the answers may hold ``QUEUED_MESSAGES`` frames of at most that size in all;
- **answers every frame OpenEnv's loop cannot take** with an error frame (``frames.problem``), and the session goes
  on. A frame over the transport's limit (``max_frame_bytes``) is refused by uvicorn before it is read: the
  connection ends with close code 1009;
- drops what the app sends once the socket is closed (no traceback when a client goes or at shutdown).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentenv.wire import Code

from .access import Access, Refusals, turn_away
from .ahead import Ahead
from .connections import HeadGate
from .frames import closing_restart, error_frame, problem, too_large
from .limits import FdBudget

__all__ = ["QUEUED_MESSAGES", "Connection", "Guard", "GuardState", "Played", "current_connection"]

log = logging.getLogger("agentenv.server")

# the protocol is one request at a time: a client may send this many frames of max_message_bytes ahead of the answers
# (in bytes: QUEUED_MESSAGES x max_message_bytes), and this many frames of any size, before its connection is closed
QUEUED_MESSAGES = 2
MAX_QUEUED = 32


class Played(Protocol):
    """What the guard asks of a connection's session (a ``BundleEnvironment``): to give up its episode, or end it."""

    def abandon(self, kind: str, message: str) -> None: ...

    async def end_episode(self) -> None: ...


@dataclass(eq=False)
class Connection:
    """One WebSocket connection: its activity, whether a request is in flight, its session and app task."""

    send: Callable[[Mapping[str, Any]], Any]
    last_activity: float
    busy: bool = False
    closed: bool = False  # the server closed it (idle, shutdown): the app's later sends are dropped
    gone: bool = False  # the client's side ended (or a send failed)
    env: Played | None = None
    task: asyncio.Task[None] | None = None


current_connection: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "agentenv_connection", default=None
)  # the connection whose message the app is handling: its session marks itself there


@dataclass(eq=False)
class GuardState:
    """What the guard enforces, and the connections it watches."""

    access: Access
    heads: HeadGate
    max_message_bytes: int
    idle_timeout: float | None
    capacity: int = 1 << 30
    fds: FdBudget | None = None
    capacity_fix: Callable[[], str] = lambda: "start the server with more sessions (max_concurrent_envs)"
    connections: set[Connection] = field(default_factory=set)
    reaper: asyncio.Task[None] | None = None
    closing: bool = False  # close_all ran: a new session is told the service restarts
    refusals: Refusals = field(default_factory=Refusals)
    ahead: Ahead | None = None  # deployments kept ready: they count against capacity, and give way to sessions

    @property
    def token(self) -> bytes | None:
        """The bearer token (None: none is needed)."""
        return self.access.token

    def refusal(self) -> tuple[str, str, dict[str, Any]] | None:
        """Why a new session cannot be admitted now (code, message, extra fields), or None."""
        active = len(self.connections)
        if self.ahead is not None and active + self.ahead.held >= self.capacity:
            self.ahead.evict()  # a ready deployment gives way to a session (a session never gives way to one)
        if active >= self.capacity:
            message = (
                f"server at capacity: {active}/{self.capacity} sessions active. Wait for a session to end, or "
                f"{self.capacity_fix()}"
            )
            return Code.CAPACITY, message, {"active_sessions": active, "max_sessions": self.capacity}
        if self.fds is not None and not self.fds.admit(len(self.heads)):
            return Code.OUT_OF_RESOURCES, self.fds.refusal(), {"active_sessions": active}
        return None

    async def close_all(self, kind: str = "restarting") -> int:
        """Close every open session with code 1012 (the service restarts) and refuse new ones; returns how many.

        A call in flight is cancelled (or abandoned, a sync tool) and its episode fails as ``kind``. Used at
        shutdown, and by hosts that do not close WebSockets themselves (a Ray Serve replica). The refusals not yet
        logged are logged now.
        """
        self.closing = True
        self.refusals.flush()
        self.heads.flush()
        open_now = [c for c in self.connections if not (c.closed or c.gone)]
        for conn in open_now:
            conn.closed = True
            abandon(conn, kind, "the server is shutting down; the episode was torn down")
            try:
                await closing_restart(conn.send)
            except Exception:  # the socket may already be gone; it is being closed either way
                pass
        return len(open_now)


def abandon(conn: Connection, kind: str, message: str) -> None:
    """Fail the connection's episode as ``kind`` and cancel the request in flight, if any (a sync tool's thread
    is left to finish: its result is dropped)."""
    if conn.env is not None:
        conn.env.abandon(kind, message)
    if conn.busy and conn.task is not None and not conn.task.done():
        conn.task.cancel()


class _Inbox:
    """The frames a client sent that OpenEnv's loop has not taken yet, bounded in frames and in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.frames: deque[tuple[Mapping[str, Any], int]] = deque()
        self.bytes = 0
        self._ready = asyncio.Event()

    def fits(self, size: int) -> bool:
        return len(self.frames) < MAX_QUEUED and self.bytes + size <= self.max_bytes

    def put(self, message: Mapping[str, Any], size: int = 0) -> None:
        self.frames.append((message, size))
        self.bytes += size
        self._ready.set()

    async def get(self) -> Mapping[str, Any]:
        while not self.frames:
            self._ready.clear()
            await self._ready.wait()
        message, size = self.frames.popleft()
        self.bytes -= size
        return message


class Guard:
    """Access for every request; admission, frame checks and reaping for WebSockets (see the module docstring)."""

    def __init__(self, app: Any, *, state: GuardState) -> None:
        self.app = app
        self.state = state
        self.max_message_bytes = state.max_message_bytes
        self.idle_timeout = state.idle_timeout
        self.connections = state.connections

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            return await self.app(scope, receive, send)
        turned = self.state.access.check(scope)
        if turned is not None:
            self.state.refusals.count(turned.code, turned.message)
            return await turn_away(turned, scope, receive, send)
        if kind != "websocket":
            return await self.app(scope, receive, send)
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return  # the client went before the handshake ended
        if self.state.closing:
            await send({"type": "websocket.accept"})
            return await closing_restart(send)
        refused = self.state.refusal()
        if refused is not None:
            code, message, extra = refused
            self.state.refusals.count(code, message)
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": error_frame(code, message, **extra)})
            await send({"type": "websocket.close", "code": 1000})
            return
        if self.state.reaper is None and self.idle_timeout is not None:
            self.state.reaper = asyncio.get_running_loop().create_task(self._reap())
        conn = Connection(send=send, last_activity=time.monotonic())
        self.connections.add(conn)
        try:
            await self._serve(conn, scope, connect, receive, send)
        finally:
            self.connections.discard(conn)
            if self.state.ahead is not None:
                self.state.ahead.fill()  # the room this session held may now hold a deployment

    def _arrived(self, message: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
        """A frame as kept until OpenEnv's loop takes it, and its size: one over the limit is kept as its error."""
        text, data = message.get("text"), message.get("bytes")
        size = len(text) if text is not None else len(data or b"")
        limit = self.max_message_bytes
        if limit // 4 < size <= limit and text is not None:  # past the limit in characters: no need to encode it
            size = len(text.encode(errors="replace"))
        if size > limit:
            return {"type": "agentenv.refused", "problem": (Code.TOO_LARGE, too_large(size, limit))}, 0
        return message, size

    async def _serve(self, conn: Connection, scope: dict[str, Any], connect: Any, receive: Any, send: Any) -> None:
        inbox = _Inbox(QUEUED_MESSAGES * self.max_message_bytes)
        inbox.put(connect)

        async def pump() -> None:
            try:
                while True:
                    message = await receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    kept, size = self._arrived(message) if message["type"] == "websocket.receive" else (message, 0)
                    if not inbox.fits(size):
                        ahead = (len(inbox.frames) + 1, inbox.bytes + size)
                        log.warning("closing a session that sent %d frames (%d bytes) ahead of the answers", *ahead)
                        await guarded_send({"type": "websocket.close", "code": 1008, "reason": "one request at a time"})
                        continue
                    inbox.put(kept, size)
                    del message, kept  # a dropped frame is not held while the next one is awaited
            except Exception:  # the server's side of the socket broke: the session ends like a disconnect
                log.exception("reading a WebSocket failed")
                message = {"type": "websocket.disconnect", "code": 1011}
            conn.gone = True
            inbox.put(message)
            if conn.busy:
                abandon(conn, "connection_lost", "the client's connection ended while a call ran; it was cancelled")

        async def guarded_receive() -> Mapping[str, Any]:
            while True:
                message = await inbox.get()
                kind = message["type"]
                if kind not in ("websocket.receive", "agentenv.refused"):
                    return message
                conn.last_activity = time.monotonic()
                refused = message["problem"] if kind == "agentenv.refused" else problem(message, self.max_message_bytes)
                if refused is not None:
                    await guarded_send({"type": "websocket.send", "text": error_frame(*refused)}, answer=False)
                    continue
                conn.busy = True
                return message

        async def guarded_send(message: Mapping[str, Any], answer: bool = True) -> None:
            if conn.closed or conn.gone:
                return  # the socket is closing: the app's late answer (or close) is moot
            if message["type"] == "websocket.send" and answer:
                conn.busy = False
                conn.last_activity = time.monotonic()
            elif message["type"] == "websocket.close":
                conn.closed = True
            try:
                await send(message)
            except OSError:  # the client went (uvicorn's ClientDisconnected): drop it, the pump sees the end
                conn.gone = True

        token = current_connection.set(conn)
        try:
            conn.task = asyncio.ensure_future(self.app(scope, guarded_receive, guarded_send))
        finally:
            current_connection.reset(token)
        pumping = asyncio.ensure_future(pump())
        try:
            await conn.task
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if this is not None and this.cancelling():  # the server cancelled this connection: pass it on
                conn.task.cancel()
                raise
            # else the guard cancelled the request in flight (abandon): the app is done with it
        finally:
            pumping.cancel()
            if conn.env is not None:  # the episode is torn down before the slot is given back
                await asyncio.shield(conn.env.end_episode())

    async def _reap(self) -> None:
        assert self.idle_timeout is not None
        interval = max(min(self.idle_timeout / 4, 5.0), 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.closed or conn.gone or conn.busy or now - conn.last_activity <= self.idle_timeout:
                    continue
                conn.closed = True
                log.info("closing a session idle for %.0f s", now - conn.last_activity)
                try:
                    await conn.send(
                        {"type": "websocket.send", "text": error_frame(Code.IDLE, _idle(self.idle_timeout))}
                    )
                    await conn.send({"type": "websocket.close", "code": 1001, "reason": "idle"})
                except Exception:  # the socket may already be gone; it is being closed either way
                    pass


def _idle(seconds: float) -> str:
    return (
        f"session idle for more than {seconds:g} s (idle_timeout); its episode was torn down. Open a new session to "
        "play again"
    )
