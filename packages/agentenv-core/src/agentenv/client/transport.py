"""OpenEnv's ``/ws`` protocol, spoken directly: one session per connection, JSON text frames, one request at a time.

The client sends ``{"type": "reset" | "step" | "state" | "close", "data": {...}}``; the server answers
``{"type": "observation", "data": {"observation": {...}, "reward": ..., "done": ...}}``, ``{"type":
"state", "data": {...}}`` or ``{"type": "error", "data": {"message": ..., "code": ...}}``. This module
knows nothing of agentenv's frames (``agentenv.wire``): it moves OpenEnv's, and says what went wrong
as ``Unreachable`` (nothing listening), ``Overloaded`` (listening, but no handshake in time; or this
process is out of file descriptors), ``Refused``, ``ErrorFrame`` or ``Closed``.

``Connection`` is the seam a session plays through: ``Transport`` over ``/ws``, or a bundle played in this process
(``InProcess``, which ``agentenv.local`` offers), whose answers are the ones a server would send.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Mapping
from typing import Any, Protocol

from agentenv.wire import MAX_FRAME

__all__ = [
    "Closed",
    "Connection",
    "ErrorFrame",
    "InProcess",
    "Overloaded",
    "Refused",
    "Transport",
    "TransportError",
    "Unreachable",
]

TOO_LARGE = "MESSAGE_TOO_LARGE"  # agentenv.wire.Code.TOO_LARGE (this module knows nothing of agentenv's frames)
NOT_JSON = "NOT_STANDARD_JSON"  # a frame holding NaN, Infinity or an integer Python will not write: not sent


class TransportError(Exception):
    """Base of what the transport raises."""


class Unreachable(TransportError):
    """Nothing accepted the connection (refused, unreachable, or the handshake timed out)."""


class Overloaded(Unreachable):
    """The server accepted the TCP connection but did not answer the handshake in time (``timed_out``: it is busy,
    or on asyncio's loop out of file descriptors) or closed it unanswered (out of file descriptors on uvloop), or
    this process could not open a socket (``local``: out of file descriptors)."""

    def __init__(self, message: str, *, local: bool = False, timed_out: bool = False) -> None:
        self.local = local
        self.timed_out = timed_out
        super().__init__(message)


class Refused(TransportError):
    """The server answered the WebSocket handshake with an HTTP error (``status``: 401 for a token)."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}: {body[:300]}")


class ErrorFrame(TransportError):
    """The server answered with an error frame; ``code`` is OpenEnv's or agentenv's (``agentenv.wire.Code``)."""

    def __init__(self, code: str, message: str, data: Mapping[str, Any]) -> None:
        self.code = code
        self.message = message
        self.data = dict(data)
        super().__init__(f"{message} (code {code})")


class Closed(TransportError):
    """The connection closed (``code`` 1006 when it broke without a close frame)."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"connection closed (code {code}{', ' + reason if reason else ''})")


class Connection(Protocol):
    """One OpenEnv session, as ``Session`` plays it: ``Transport``'s members (see each there)."""

    open_timeout: float

    @property
    def is_open(self) -> bool: ...
    def closed(self) -> Closed | None: ...
    async def open(self) -> None: ...
    async def request(self, kind: str, data: Mapping[str, Any] | None = None, *, limit: int = 0) -> dict[str, Any]: ...
    async def close(self) -> None: ...
    def abort(self) -> None: ...


class InProcess(Protocol):
    """A bundle played in this process: a ``Connection`` per session, and the Task API's answers."""

    def connect(self) -> Connection:
        """A new session."""
        ...

    def info(self) -> dict[str, Any]:
        """What ``GET /agentenv`` answers (``agentenv.wire.ServerInfo``, as JSON)."""
        ...

    def task_range(self, split: str, start: int, stop: int) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` of ``split``, as Task API rows."""
        ...


class Transport:
    """One OpenEnv session over ``/ws``. ``request`` sends a frame and returns the answer's data."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        open_timeout: float = 30.0,
        use_proxy: bool = True,
    ) -> None:
        self.url = url
        self.headers = dict(headers or {})
        self.open_timeout = open_timeout
        self.use_proxy = use_proxy
        self._ws: Any = None
        self._lock = asyncio.Lock()
        # imported here, before any request is timed: the first import costs 0.15-0.5 s, which the first
        # rollout would otherwise count as env time
        import websockets.asyncio.client  # noqa: F401

    @property
    def is_open(self) -> bool:
        """Whether the connection is up (it may still close before the next answer)."""
        return self._ws is not None and self._ws.close_code is None

    def closed(self) -> Closed | None:
        """How the connection closed, once it has (None while it is up or was never opened)."""
        ws = self._ws
        if ws is None or ws.close_code is None:
            return None
        return Closed(int(ws.close_code), str(ws.close_reason or ""))

    async def open(self) -> None:
        """Connect (a no-op when connected)."""
        if self._ws is not None:
            return
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidStatus

        try:
            self._ws = await connect(
                self.url,
                additional_headers=self.headers or None,
                open_timeout=self.open_timeout,
                max_size=MAX_FRAME,
                compression=None,  # frames are small JSON; deflate costs both sides CPU on every call
                proxy=True if self.use_proxy else None,
                close_timeout=2,
            )
        except InvalidStatus as exc:
            response = exc.response
            body = response.body.decode(errors="replace") if response.body else ""
            raise Refused(response.status_code, body) from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                raise Overloaded(
                    f"this process could not open a socket ({why}); raise its limit (ulimit -n) or "
                    "run fewer sessions in it",
                    local=True,
                ) from None
            if isinstance(exc, TimeoutError) and await _listening(self.url):
                raise Overloaded(_unanswered(self.open_timeout), timed_out=True) from None
            reset = isinstance(exc, ConnectionResetError | BrokenPipeError)
            if reset or isinstance(exc, InvalidMessage):  # connected, then closed (or not HTTP) before answering
                raise Overloaded(
                    f"the server accepted the connection but closed it before answering the WebSocket "
                    f"handshake ({why}): it is overloaded or out of file descriptors, or the URL is "
                    "not an agentenv server's"
                ) from None
            raise Unreachable(why) from None

    async def request(self, kind: str, data: Mapping[str, Any] | None = None, *, limit: int = 0) -> dict[str, Any]:
        """Send a ``kind`` frame and return the data of the answer (an observation's or a state's).

        Raises ``ErrorFrame`` for an error frame (the connection may stay open: see ``is_open``) and
        ``Closed`` when the connection ends first. Callers bound the wait (``asyncio.timeout``) and drop
        the transport when it expires: a late answer would be read as the next request's. A frame over
        ``limit`` bytes (when given) is not sent: ``ErrorFrame`` with code ``MESSAGE_TOO_LARGE``, as the
        server would answer it, and the connection stays as it was; so is a frame holding a number standard JSON
        cannot carry (``NaN``, ``Infinity``, an integer of more than 4,300 digits): ``ErrorFrame`` with code
        ``NOT_STANDARD_JSON``.
        """
        from websockets.exceptions import ConnectionClosed

        frame = {"type": kind} if data is None else {"type": kind, "data": dict(data)}
        text = standard_json(frame)
        if limit and len(text) > limit // 4 and len(text.encode()) > limit:
            raise ErrorFrame(
                TOO_LARGE,
                f"a frame of {len(text.encode())} bytes is over the server's limit of {limit} bytes; it was not sent",
                {},
            )
        async with self._lock:
            await self.open()
            try:
                await self._ws.send(text)
            except ConnectionClosed as exc:
                # a server may refuse the session in a frame sent as it accepts, then close (OpenEnv at
                # capacity does): that frame, already received, is the answer
                raw = await self._buffered()
                if raw is None:
                    raise self._closed(exc) from None
            else:
                try:
                    raw = await self._ws.recv()
                except ConnectionClosed as exc:
                    raise self._closed(exc) from None
        if not isinstance(raw, str):
            raise ErrorFrame("BINARY", "the server answered with a binary frame", {})
        try:
            answer = json.loads(raw)
        except json.JSONDecodeError:
            raise ErrorFrame("INVALID_JSON", f"the server answered {raw[:200]!r}, which is not JSON", {}) from None
        if not isinstance(answer, dict):
            raise ErrorFrame("INVALID_JSON", f"the server answered {raw[:200]!r}, which is not a frame", {})
        payload = answer.get("data") if isinstance(answer.get("data"), dict) else {}
        if answer.get("type") == "error":
            raise ErrorFrame(str(payload.get("code", "")), str(payload.get("message", "")), payload)
        return payload

    async def _buffered(self) -> str | bytes | None:
        """A frame that arrived before the connection closed, or None."""
        from websockets.exceptions import ConnectionClosed

        try:
            return await asyncio.wait_for(self._ws.recv(), 0.5)
        except (ConnectionClosed, TimeoutError):
            return None

    def _closed(self, exc: Any) -> Closed:
        received = getattr(exc, "rcvd", None)
        if received is None:
            return Closed(1006, "")
        return Closed(int(received.code), str(received.reason or ""))

    async def close(self) -> None:
        """Say goodbye (the server ends the session and tears down its episode) and disconnect."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            if ws.close_code is None:
                await asyncio.wait_for(ws.send(json.dumps({"type": "close"})), 2.0)
        except Exception:  # the connection is going either way
            pass
        try:
            await asyncio.wait_for(ws.close(), 5.0)
        except Exception:
            pass

    def abort(self) -> None:
        """Drop the connection now, without a goodbye (after a request was abandoned mid-way)."""
        ws, self._ws = self._ws, None
        transport = getattr(ws, "transport", None)
        if transport is not None:
            transport.abort()  # the server sees the connection end and frees the session's slot at once


def standard_json(frame: Mapping[str, Any]) -> str:
    """``frame`` as standard JSON; ``ErrorFrame`` with code ``NOT_STANDARD_JSON`` for a number it cannot carry."""
    try:
        return json.dumps(frame, allow_nan=False)
    except ValueError as exc:  # NaN or Infinity (allow_nan), or an int past sys.get_int_max_str_digits()
        raise ErrorFrame(NOT_JSON, f"it holds a number standard JSON cannot carry ({exc}); not sent", {}) from None


def _unanswered(seconds: float) -> str:
    return (
        f"the server accepted the connection but did not answer the WebSocket handshake within {seconds:g} s: it is "
        "too busy to answer (its event loop is behind), or, on asyncio's loop, out of file descriptors (its log says "
        "which); a longer reset_timeout waits longer"
    )


async def _listening(url: str) -> bool:
    """Whether something accepts TCP connections at ``url``'s host and port (a handshake timed out: which way?)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "wss" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parsed.hostname, port), 2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True
