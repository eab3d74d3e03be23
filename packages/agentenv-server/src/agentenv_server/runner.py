"""Running the app: in a background thread (tests, ``AgentEnv.local``) or as ``agentenv serve``."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn

from .app import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["ServerThread", "is_loopback", "redact_token", "uvicorn_config"]


def uvicorn_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    log_level: str = "warning",
    graceful_seconds: int = 60,
) -> uvicorn.Config:
    """uvicorn settings for an agentenv app: keepalive pings reap half-open sockets, frames fit the app's limit."""
    limit = getattr(getattr(app, "state", None), "max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws_ping_interval=ping_interval,
        ws_ping_timeout=ping_timeout,
        # the app answers an oversized frame itself; the transport limit sits well above it
        ws_max_size=max(16 * 1024 * 1024, 4 * limit),
        timeout_graceful_shutdown=graceful_seconds,
        lifespan="on",
    )
    redact_token(app)  # after uvicorn set its log handlers up
    return config


class _Redact(logging.Filter):
    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.secret in message:
            record.msg, record.args = message.replace(self.secret, "<token>"), ()
        return True


def redact_token(app: Any, loggers: Sequence[str] = ()) -> None:
    """Keep the app's token out of every log line (uvicorn's debug log prints request headers).

    Filters the handlers of the root logger, uvicorn's and those of ``loggers`` (a host's own, e.g. Ray Serve's).
    """
    guard = getattr(getattr(app, "state", None), "guard", None)
    token = guard.token.decode() if guard is not None and guard.token else None
    if not token:
        return
    names = ("uvicorn", "uvicorn.error", "uvicorn.access", *loggers)
    for logger in [logging.getLogger(), *(logging.getLogger(n) for n in names)]:
        for handler in logger.handlers:
            if not any(isinstance(f, _Redact) and f.secret == token for f in handler.filters):
                handler.addFilter(_Redact(token))


class ServerThread:
    """An app served by uvicorn in a daemon thread on a loopback port (0: any free port)."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, **config: Any) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn_config(app, host=host, port=self.port, **config))
        self._thread = threading.Thread(target=self._run, name=f"agentenv-server:{self.port}", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, timeout: float = 30.0) -> ServerThread:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the agentenv server on {self.url} did not start: {self._error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agentenv server on {self.url} did not start within {timeout:g} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Shut down gracefully: clients are told the service restarts, every episode is torn down."""
        if self._thread.is_alive():
            self.server.should_exit = True
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
