"""Who may talk to the server: the bearer token, web pages (``Origin``), and requests that arrive on a public address
without a token; and the count of everyone turned away, logged at most once per period.

- **The token**: every request but ``GET``/``HEAD /health`` carries ``Authorization: Bearer <token>`` (compared in
  constant time), else 401; a WebSocket is refused before it opens.
- **Web pages**: a browser names the page that opens a WebSocket or sends a cross-site request in ``Origin``; agentenv's
  clients are programs and send none. A request with an ``Origin`` the server was not told to allow
  (``allow_origins``, ``--allow-origin``) gets 403: without this, any page in the user's browser could play episodes
  on a tokenless loopback server (and run ``bash`` where a toolset offers it).
- **Public addresses**: without a token (and without ``allow_no_token``), a request that arrived on an address that is
  not loopback gets 403, whatever runs the app: ``agentenv serve`` refuses such a ``--host`` at start, but the user's
  own uvicorn or a Ray Serve proxy may bind ``0.0.0.0``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenv.hosts import is_loopback

__all__ = ["FOREIGN_KEY", "REFUSAL_LOG_SECONDS", "UNAUTHORIZED", "Access", "Refusals", "Turned", "turn_away"]

log = logging.getLogger("agentenv.server")

REFUSAL_LOG_SECONDS = 10.0
UNAUTHORIZED = "UNAUTHORIZED"  # the count of requests refused for the token, in the refusals' log line
FOREIGN_ORIGIN = "FOREIGN_ORIGIN"
PUBLIC_NO_TOKEN = "PUBLIC_WITHOUT_TOKEN"
FOREIGN_KEY = "FOREIGN_KEY"  # a sandboxed agent's model call with a key it was not given (agentenv_harness.capture)


@dataclass(frozen=True)
class Turned:
    """A request turned away: its HTTP status, the code it is counted under, and the message (which names the fix)."""

    status: int
    code: str
    message: str


@dataclass
class Refusals:
    """Everyone the server turned away, by code, logged at most once per ``REFUSAL_LOG_SECONDS`` with the count since
    the last line, and once more at shutdown (``flush``), so that no refusal goes uncounted."""

    seconds: float = REFUSAL_LOG_SECONDS
    metric: Any = None  # a Prometheus counter with a reason label (agentenv_refused_total), when the app has one
    _counts: dict[str, int] = field(default_factory=dict)
    _first: dict[str, str] = field(default_factory=dict)
    _logged_at: float = -1e9

    def count(self, code: str, message: str) -> None:
        """Count one refusal; logs the counts when the last line is older than the period."""
        self._counts[code] = self._counts.get(code, 0) + 1
        if self.metric is not None:
            self.metric.labels(code).inc()
        self._first.setdefault(code, message)
        if time.monotonic() - self._logged_at >= self.seconds:
            self.flush()

    def flush(self) -> None:
        """Log the refusals counted since the last line, if any."""
        if not self._counts:
            return
        now = time.monotonic()
        span = min(now - self._logged_at, self.seconds)
        counts = ", ".join(f"{n} {c}" for c, n in self._counts.items())
        reasons = "; ".join(self._first.values())
        log.warning("refused new sessions and requests (%s in the last %.0f s): %s", counts, span, reasons)
        self._counts, self._first, self._logged_at = {}, {}, now


@dataclass
class Access:
    """The token, the allowed origins and the public-address rule (see the module docstring)."""

    token: bytes | None
    allow_origins: Collection[str] = ()
    allow_no_token: bool = False

    def __post_init__(self) -> None:
        self.allow_origins = frozenset(o.rstrip("/").lower() for o in self.allow_origins)

    def check(self, scope: Mapping[str, Any]) -> Turned | None:
        """Why this request is turned away, or None."""
        headers = scope.get("headers", ())
        origin = next((v for n, v in headers if n == b"origin"), None)
        if origin is not None and origin.decode("latin-1").rstrip("/").lower() not in self.allow_origins:
            return Turned(403, FOREIGN_ORIGIN, _foreign(origin.decode("latin-1")[:200]))
        if self.token is None:
            server = scope.get("server")
            if server and server[1] is not None and not is_loopback(str(server[0])) and not self.allow_no_token:
                return Turned(403, PUBLIC_NO_TOKEN, _public(str(server[0])))
            return None
        if scope["type"] == "http" and scope["path"] == "/health" and scope.get("method") in ("GET", "HEAD"):
            return None
        for name, value in headers:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
                    return None
                break
        return Turned(401, UNAUTHORIZED, _WRONG_TOKEN)


_WRONG_TOKEN = (
    "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the server was started with"
)


def _foreign(origin: str) -> str:
    return (
        f"a request from a web page (Origin: {origin}) was refused: agentenv's clients are programs and send no "
        f"Origin. To serve this page, start the server with --allow-origin {origin} (allow_origins= of build_app)"
    )


def _public(host: str) -> str:
    return (
        f"this server has no token and the request arrived on {host}, which is not loopback: serve it with a token "
        "(token= of build_app, --token-var of agentenv serve), or say the network is trusted (allow_no_token=True, "
        "--allow-no-token)"
    )


async def turn_away(turned: Turned, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
    """Answer ``turned``: an HTTP response that closes the connection, or a WebSocket refused before it opens; the
    body is JSON, ``detail`` (the message, naming the fix) and ``code``. Every agentenv guard refuses through it."""
    body = json.dumps({"detail": turned.message, "code": turned.code}).encode()
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if turned.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": turned.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        _QuietDenials.expect()
        await send({"type": "websocket.http.response.start", "status": turned.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


class _QuietDenials(logging.Filter):
    """uvicorn's WebSocket protocol logs ``ASGI callable returned without completing handshake`` at ERROR after every
    handshake answered with an HTTP response (a denial the ASGI spec provides for): one such line is dropped per denial
    sent, any other is let through."""

    MESSAGE = "ASGI callable returned without completing handshake"
    pending = 0

    @classmethod
    def expect(cls) -> None:
        cls.pending += 1
        logger = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())

    def filter(self, record: logging.LogRecord) -> bool:
        if _QuietDenials.pending > 0 and self.MESSAGE in str(record.msg):
            _QuietDenials.pending -= 1
            return False
        return True
