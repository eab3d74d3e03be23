"""Connections that have not sent a whole request head yet: a deadline, a size limit, and a bounded number of them.

Until a connection's request head (the request line and headers) is in, nothing can tell a trainer from a stranger:
the token is a header. uvicorn waits for a head forever and, with httptools (its choice wherever it is installed),
takes a header of any size; each such connection also holds a file descriptor, which the sessions' budget counts
(``limits.FdBudget``). So, for every connection uvicorn serves (``uvicorn_config`` wires it in):

- a head must be in within ``header_timeout`` seconds of the connection or of its first byte (408, then closed);
- a head may be ``MAX_HEAD_BYTES`` long (431, then closed);
- at most ``HeadGate.room`` connections may be waiting for their head at once: a new one past that closes the one
  that has waited longest. The descriptors for these are kept aside in the budget (``FdBudget.spare``) and not
  counted against sessions: a flood of half-sent requests never makes a session with the token wait.

A subclass of uvicorn's own protocol (h11's or httptools', as uvicorn would pick), because ASGI middleware only runs
once a head is in. Ray Serve parses requests in its proxy, not here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11

__all__ = ["DEFAULT_HEADER_TIMEOUT", "MAX_HEAD_BYTES", "HeadGate", "gated_protocol"]

log = logging.getLogger("agentenv.server")

DEFAULT_HEADER_TIMEOUT = 20.0
MAX_HEAD_BYTES = 64 * 1024  # nginx's large_client_header_buffers allow 4 x 8 KiB; a token and a few headers fit
LOG_SECONDS = 10.0
LINGER_SECONDS = 1.0  # after a 408 or 431, what the client still sends is read and dropped, so it gets the answer


class HeadGate:
    """The connections waiting for their request head (oldest first), and what happened to those cut off."""

    def __init__(self, timeout: float = DEFAULT_HEADER_TIMEOUT, room: int = 256) -> None:
        self.timeout = timeout
        self.room = room
        self.waiting: dict[Any, None] = {}
        self._cut: dict[str, int] = {}
        self._logged_at = -1e9

    def __len__(self) -> int:
        return len(self.waiting)

    def arrive(self, conn: Any) -> None:
        """``conn`` waits for its head; past ``room``, the one that waited longest is closed."""
        self.waiting[conn] = None
        while len(self.waiting) > self.room:
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest)
            self.cut(oldest, "crowded out", None)

    def done(self, conn: Any) -> None:
        """``conn``'s head is in (or it closed)."""
        self.waiting.pop(conn, None)

    def cut(self, conn: Any, why: str, status: int | None) -> None:
        """Close ``conn`` (answering ``status`` first, when given), counted under ``why`` and logged once per period."""
        self.waiting.pop(conn, None)
        transport = conn.transport
        if status is None or transport.is_closing():
            transport.abort()
        else:
            # closing now, with the client's bytes unread, would reset the connection and lose the answer
            text = _ANSWERS[status].encode()
            head = f"HTTP/1.1 {status} {_PHRASES[status]}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            transport.write(f"{head}content-length: {len(text)}\r\nconnection: close\r\n\r\n".encode() + text)
            conn.dropping = True
            conn.loop.call_later(LINGER_SECONDS, transport.close)
        self._cut[why] = self._cut.get(why, 0) + 1
        if time.monotonic() - self._logged_at >= LOG_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Log the connections cut off since the last line, if any."""
        if self._cut:
            counts = ", ".join(f"{n} {why}" for why, n in self._cut.items())
            log.warning("closed connections that sent no whole request head (%s): %s", counts, _FIX)
            self._cut, self._logged_at = {}, time.monotonic()


_PHRASES = {408: "Request Timeout", 431: "Request Header Fields Too Large"}
_ANSWERS = {
    408: "the request head (request line and headers) did not arrive in time; the connection is closed\n",
    431: f"the request head is over {MAX_HEAD_BYTES} bytes; the connection is closed\n",
}
_FIX = (
    "408: past the header deadline (--header-timeout), 431: a head over 64 KiB, crowded out: past the connections "
    "allowed to wait for their head. A client behind a slow network may need a longer --header-timeout"
)


def gated_protocol(base: type[asyncio.Protocol], gate: HeadGate) -> type[asyncio.Protocol]:
    """``base`` (uvicorn's ``H11Protocol`` or ``HttpToolsProtocol``) held to ``gate``."""
    h11_based = base.__name__ == "H11Protocol"

    class Gated(base):  # type: ignore[valid-type,misc]
        _head_bytes = 0
        _tail = b""  # the last bytes seen, for a head's end split across two reads
        _in_head = True
        _timer: asyncio.TimerHandle | None = None
        dropping = False  # answered (408, 431) and closing: what still arrives is read and dropped

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._begin_head()

        def _begin_head(self) -> None:
            self._in_head = True
            if self._timer is None:
                self._timer = self.loop.call_later(gate.timeout, self._late)
                gate.arrive(self)

        def _end_head(self) -> None:
            self._in_head, self._head_bytes, self._tail = False, 0, b""
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            gate.done(self)

        def _late(self) -> None:
            self._timer = None
            gate.cut(self, "past the header deadline", 408)

        def data_received(self, data: bytes) -> None:
            if self.dropping:
                return
            if self._in_head:  # counted before the parser takes it: a long head is never held whole
                seen = self._tail + data
                end = seen.find(b"\r\n\r\n")
                self._head_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
                self._tail = seen[-3:]
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._end_head()
                    gate.cut(self, "head too large", 431)
                    return
            super().data_received(data)
            if self.transport.is_closing():
                self._end_head()
                return
            if h11_based:  # h11 says by its state whether a head is being read: IDLE until the request is in
                self._in_head = self.conn.their_state is h11.IDLE
            if self._in_head:
                self._begin_head()
            else:
                self._end_head()

        def on_message_begin(self) -> None:  # httptools: a new request (also on a kept-alive connection)
            super().on_message_begin()
            self._in_head = True

        def on_headers_complete(self) -> None:  # httptools
            self._in_head = False
            super().on_headers_complete()

        def handle_websocket_upgrade(self, *args: Any) -> None:
            self._end_head()
            super().handle_websocket_upgrade(*args)

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_head()
            super().connection_lost(exc)

    Gated.__name__ = Gated.__qualname__ = f"Gated{base.__name__}"
    return Gated
