"""ASGI middleware around OpenEnv's app: the token, admission, frame checks, idle reaping, and connection ends.

Pure ASGI (added with ``app.add_middleware``) so that it sees WebSocket frames, which HTTP middleware
cannot. For every WebSocket it:

- **admits** a session only while there is room: ``max_concurrent_envs`` sessions (a session counts until
  its episode is torn down) and the file descriptors to hold one (``limits.FdBudget``). Otherwise the client
  gets a ``CAPACITY_REACHED`` or ``OUT_OF_RESOURCES`` error frame, then close code 1000, before anything is
  created (OpenEnv's own shape for a full server);
- **reads the client's frames all the time**, not only when OpenEnv's loop asks for the next one, so a
  connection that ends while a call runs is seen at once: the call is cancelled (an async tool) or
  abandoned (a sync tool, left to finish on its pool thread), the episode fails, and its slot is given back
  as soon as it is torn down;
- **answers every frame OpenEnv's loop cannot take** with an error frame, and the session goes on: a frame
  over ``max_message_bytes`` (``MESSAGE_TOO_LARGE``), a binary frame, JSON that is not an object or is
  nested deeper than ``MAX_DEPTH`` (``BAD_FRAME``). A frame over the transport's limit (``max_frame_bytes``)
  is refused by uvicorn before it is read: the connection ends with close code 1009;
- drops what the app sends once the socket is closed (no traceback when a client goes or at shutdown).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenv.wire import Code

from .environment import BundleEnvironment, current_connection
from .limits import FdBudget

__all__ = ["MAX_DEPTH", "Connection", "Guard", "GuardState"]

log = logging.getLogger("agentenv.server")

MAX_DEPTH = 100  # JSON nesting a frame may have (OpenEnv's loop fails on what Python's parser cannot take)
MAX_QUEUED = 32  # frames a client may send ahead while a request runs (the protocol is one at a time)
REFUSAL_LOG_SECONDS = 10.0


@dataclass(eq=False)
class Connection:
    """One WebSocket connection: its activity, whether a request is in flight, its session and app task."""

    send: Callable[[Mapping[str, Any]], Any]
    last_activity: float
    busy: bool = False
    closed: bool = False  # the server closed it (idle, shutdown): the app's later sends are dropped
    gone: bool = False  # the client's side ended (or a send failed)
    env: BundleEnvironment | None = None
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class GuardState:
    """What the guard enforces, and the connections it watches."""

    token: bytes | None
    max_message_bytes: int
    idle_timeout: float | None
    capacity: int = 1 << 30
    fds: FdBudget | None = None
    capacity_fix: Callable[[], str] = lambda: "start the server with more sessions (max_concurrent_envs)"
    connections: set[Connection] = field(default_factory=set)
    reaper: asyncio.Task[None] | None = None
    closing: bool = False  # close_all ran: a new session is told the service restarts
    _refused: dict[str, int] = field(default_factory=dict)
    _refusals_logged_at: float = -1e9

    def refusal(self) -> tuple[str, str, dict[str, Any]] | None:
        """Why a new session cannot be admitted now (code, message, extra fields), or None."""
        active = len(self.connections)
        if active >= self.capacity:
            message = (f"server at capacity: {active}/{self.capacity} sessions active. Wait for a session to end, or "
                       f"{self.capacity_fix()}")  # fmt: skip
            return Code.CAPACITY, message, {"active_sessions": active, "max_sessions": self.capacity}
        if self.fds is not None and not self.fds.admit():
            return Code.OUT_OF_RESOURCES, self.fds.refusal(), {"active_sessions": active}
        return None

    def count_refusal(self, code: str, message: str) -> None:
        """Log refusals at most once per ``REFUSAL_LOG_SECONDS``, with how many there were."""
        self._refused[code] = self._refused.get(code, 0) + 1
        now = time.monotonic()
        if now - self._refusals_logged_at >= REFUSAL_LOG_SECONDS:
            counts = ", ".join(f"{n} {c}" for c, n in self._refused.items())
            log.warning("refused new sessions (%s in the last %.0f s): %s", counts, REFUSAL_LOG_SECONDS, message)
            self._refused, self._refusals_logged_at = {}, now

    async def close_all(self, kind: str = "restarting") -> int:
        """Close every open session with code 1012 (the service restarts) and refuse new ones; returns how many.

        A call in flight is cancelled (or abandoned, a sync tool) and its episode fails as ``kind``. Used at
        shutdown, and by hosts that do not close WebSockets themselves (a Ray Serve replica).
        """
        self.closing = True
        open_now = [c for c in self.connections if not (c.closed or c.gone)]
        for conn in open_now:
            conn.closed = True
            abandon(conn, kind, "the server is shutting down; the episode was torn down")
            try:
                await _close_restarting(conn.send)
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


class Guard:
    """Token check for every request but ``GET``/``HEAD /health``; admission, frame checks and reaping for
    WebSockets (see the module docstring)."""

    def __init__(self, app: Any, *, state: GuardState) -> None:
        self.app = app
        self.state = state
        self.token = state.token
        self.max_message_bytes = state.max_message_bytes
        self.idle_timeout = state.idle_timeout
        self.connections = state.connections

    def _authorized(self, scope: Mapping[str, Any]) -> bool:
        if self.token is None:
            return True
        if scope["type"] == "http" and scope["path"] == "/health" and scope.get("method") in ("GET", "HEAD"):
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            return await self.app(scope, receive, send)
        if not self._authorized(scope):
            return await _refuse(scope, receive, send)
        if kind != "websocket":
            return await self.app(scope, receive, send)
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return  # the client went before the handshake ended
        if self.state.closing:
            await send({"type": "websocket.accept"})
            return await _close_restarting(send)
        refused = self.state.refusal()
        if refused is not None:
            code, message, extra = refused
            self.state.count_refusal(code, message)
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": _error_frame(code, message, **extra)})
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

    async def _serve(self, conn: Connection, scope: dict[str, Any], connect: Any, receive: Any, send: Any) -> None:
        inbox: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
        inbox.put_nowait(connect)

        async def pump() -> None:
            try:
                while True:
                    message = await receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    if inbox.qsize() >= MAX_QUEUED:
                        log.warning("closing a session that sent %d frames without waiting for answers", MAX_QUEUED)
                        await guarded_send({"type": "websocket.close", "code": 1008, "reason": "one request at a time"})
                        continue
                    inbox.put_nowait(message)
            except Exception:  # the server's side of the socket broke: the session ends like a disconnect
                log.exception("reading a WebSocket failed")
                message = {"type": "websocket.disconnect", "code": 1011}
            conn.gone = True
            inbox.put_nowait(message)
            if conn.busy:
                abandon(conn, "connection_lost", "the client's connection ended while a call ran; it was cancelled")

        async def guarded_receive() -> Mapping[str, Any]:
            while True:
                message = await inbox.get()
                if message["type"] != "websocket.receive":
                    return message
                conn.last_activity = time.monotonic()
                problem = self._check(message)
                if problem is not None:
                    await guarded_send({"type": "websocket.send", "text": _error_frame(*problem)}, answer=False)
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

    def _check(self, message: Mapping[str, Any]) -> tuple[str, str] | None:
        """The error frame's code and message for a frame OpenEnv's loop cannot take, else None."""
        limit = self.max_message_bytes
        text = message.get("text")
        if text is None:
            size = len(message.get("bytes") or b"")
            if size > limit:
                return Code.TOO_LARGE, _too_large(size, limit)
            return Code.BAD_FRAME, (f"a binary frame ({size} bytes) was dropped: agentenv's protocol is JSON text "
                                    "frames ({\"type\": ..., \"data\": {...}}); the session goes on")  # fmt: skip
        size = len(text) if len(text) * 4 <= limit else len(text.encode(errors="replace"))
        if size > limit:
            return Code.TOO_LARGE, _too_large(size, limit)
        if text[:1] == "{" and text.count("[") + text.count("{") <= MAX_DEPTH:
            return None  # an object no deeper than the limit (or not JSON: OpenEnv answers INVALID_JSON and goes on)
        try:
            frame = json.loads(text)
        except RecursionError:
            return Code.BAD_FRAME, _too_deep()
        except ValueError:
            return None  # OpenEnv answers INVALID_JSON itself, and goes on
        if not isinstance(frame, dict):
            return Code.BAD_FRAME, (f"a frame must be a JSON object ({{\"type\": ..., \"data\": {{...}}}}), not "
                                    f"{_JSON_TYPES.get(type(frame), 'a value')}; it was dropped and the session goes "
                                    "on")  # fmt: skip
        if text.count("[") + text.count("{") > MAX_DEPTH and _depth(frame) > MAX_DEPTH:
            return Code.BAD_FRAME, _too_deep()
        return None

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
                    await conn.send({"type": "websocket.send", "text": _error_frame(
                        Code.IDLE, f"session idle for more than {self.idle_timeout:g} s (idle_timeout); its episode "
                        "was torn down. Open a new session to play again")})  # fmt: skip
                    await conn.send({"type": "websocket.close", "code": 1001, "reason": "idle"})
                except Exception:  # the socket may already be gone; it is being closed either way
                    pass


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}  # fmt: skip


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (without recursion: it may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _too_large(size: int, limit: int) -> str:
    return (f"message of {size} bytes is over the server's limit of {limit} bytes (max_message_bytes, "
            "--max-message-bytes); it was dropped and the session goes on")  # fmt: skip


def _too_deep() -> str:
    return f"a frame nested deeper than {MAX_DEPTH} levels was dropped; the session goes on"


def _error_frame(code: str, message: str, **extra: Any) -> str:
    """An OpenEnv error frame carrying agentenv's own code (``agentenv.wire.Code``)."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


async def _close_restarting(send: Any) -> None:
    # 1012 (service restart), as uvicorn closes at shutdown: clients replay the episode or wait for the server
    await send({"type": "websocket.send", "text": _error_frame(
        Code.RESTARTING, "the server is shutting down; the episode was torn down. Replay it (waits_for_server=True "
        "waits for a server)")})  # fmt: skip
    await send({"type": "websocket.close", "code": 1012, "reason": "restarting"})


async def _close_restarting(send: Any) -> None:
    # 1012 (service restart), as uvicorn closes at shutdown: clients replay the episode or wait for the server
    await send({"type": "websocket.send", "text": _error_frame(
        Code.RESTARTING, "the server is shutting down; the episode was torn down. Replay it (waits_for_server=True "
        "waits for a server)")})  # fmt: skip
    await send({"type": "websocket.close", "code": 1012, "reason": "restarting"})


async def _refuse(scope: Mapping[str, Any], receive: Any, send: Any) -> None:
    body = json.dumps({"detail": "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token "
                                 "the server was started with"}).encode()  # fmt: skip
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    # a WebSocket is refused before it opens: no session is created
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
