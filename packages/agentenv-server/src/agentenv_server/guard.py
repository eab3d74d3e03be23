"""ASGI middleware around OpenEnv's app: bearer-token auth, a frame size limit, and idle reaping.

Pure ASGI (added with ``app.add_middleware``) so that it sees WebSocket frames, which HTTP middleware
cannot. Frames it refuses are answered with OpenEnv-shaped error frames carrying agentenv's codes
(``agentenv.wire.Code``); the session goes on unless the code says otherwise.
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

__all__ = ["Connection", "Guard", "GuardState"]

log = logging.getLogger("agentenv.server")


@dataclass(eq=False)
class Connection:
    """One WebSocket connection: when it was last active, whether a request is in flight, its session."""

    send: Callable[[Mapping[str, Any]], Any]
    last_activity: float
    busy: bool = False
    closed: bool = False
    env: BundleEnvironment | None = None


@dataclass(eq=False)
class GuardState:
    """What the guard enforces, and the connections it watches."""

    token: bytes | None
    max_message_bytes: int
    idle_timeout: float | None
    connections: set[Connection] = field(default_factory=set)
    reaper: asyncio.Task[None] | None = None
    closing: bool = False  # close_all ran: a new session is told the service restarts

    async def close_all(self) -> int:
        """Close every open session with code 1012 (the service restarts) and refuse new ones; returns how many.

        For hosts that do not close WebSockets at shutdown themselves (uvicorn does; a Ray Serve replica does not).
        """
        self.closing = True
        open_now = [conn for conn in self.connections if not conn.closed]
        for conn in open_now:
            conn.closed = True
            try:
                await _close_restarting(conn.send)
            except Exception:  # the socket may already be gone; it is being closed either way
                pass
        return len(open_now)


class Guard:
    """Token check for every request but ``GET /health``; size limit and idle reaping for ``/ws``.

    Pure ASGI middleware (added with ``app.add_middleware``) so it sees WebSocket frames, which
    HTTP middleware cannot.
    """

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
        if self.state.closing:
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            return await _close_restarting(send)
        if self.state.reaper is None and self.idle_timeout is not None:
            self.state.reaper = asyncio.get_running_loop().create_task(self._reap())
        conn = Connection(send=send, last_activity=time.monotonic())
        self.connections.add(conn)
        limit = self.max_message_bytes

        async def guarded_receive() -> Mapping[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                conn.last_activity = time.monotonic()
                payload = message.get("text")
                size = len(payload.encode()) if payload is not None else len(message.get("bytes") or b"")
                if size > limit:
                    await send({"type": "websocket.send", "text": _error_frame(
                        Code.TOO_LARGE, f"message of {size} bytes is over the server's limit of {limit} bytes "
                        "(build_app(max_message_bytes=...)); it was dropped and the session goes on")})  # fmt: skip
                    continue
                conn.busy = True
                return message

        async def guarded_send(message: Mapping[str, Any]) -> None:
            if conn.closed:
                return  # the reaper closed this socket; the app's late close is moot
            if message["type"] == "websocket.send":
                conn.busy = False
                conn.last_activity = time.monotonic()
            await send(message)

        token = current_connection.set(conn)
        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            current_connection.reset(token)
            self.connections.discard(conn)

    async def _reap(self) -> None:
        assert self.idle_timeout is not None
        interval = max(min(self.idle_timeout / 4, 5.0), 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.closed or conn.busy or now - conn.last_activity <= self.idle_timeout:
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


def _error_frame(code: str, message: str) -> str:
    """An OpenEnv error frame carrying agentenv's own code (``agentenv.wire.Code``)."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


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
