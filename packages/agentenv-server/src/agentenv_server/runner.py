"""Running the app: in a background thread (tests, ``AgentEnv.local``) or as ``agentenv serve``, with a bounded
shutdown (``Server``) and the token kept out of every log line."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import uvicorn
from agentenv.hosts import is_loopback
from agentenv.sandbox import procs

from .app import MIN_FRAME_BYTES, close_sessions
from .connections import DEFAULT_HEADER_TIMEOUT, MAX_HEAD_BYTES, gated_protocol

__all__ = [
    "DEFAULT_SHUTDOWN_GRACE",
    "Server",
    "ServerThread",
    "is_loopback",
    "listening_socket",
    "local_token",
    "redact_token",
    "uvicorn_config",
]

log = logging.getLogger("agentenv.server")

DEFAULT_SHUTDOWN_GRACE = 10.0
WATCHDOG_SLACK = 5.0  # past the grace, ``agentenv serve`` exits whatever is still running


def uvicorn_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    log_level: str = "warning",
    grace: float = DEFAULT_SHUTDOWN_GRACE,
    loop: str = "auto",
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    ssl_keyfile: str | None = None,
    ssl_certfile: str | None = None,
) -> uvicorn.Config:
    """uvicorn settings for an agentenv app: keepalive pings reap half-open sockets, frames over the app's
    ``max_frame_bytes`` end the connection (close code 1009), shutdown waits ``grace`` seconds at most, and a
    connection's request head must be in within ``header_timeout`` seconds and 64 KiB (``connections``).
    No WebSocket compression (permessage-deflate), which agentenv's client never asks for: with it, 16 KiB on the
    wire inflate to a 16 MiB frame, and uvicorn inflates every frame of one read (up to 256 KiB: 16 such frames,
    each kept twice, as bytes and as text) before the guard sees the first; without it, a frame costs the server
    what its client sent.
    ``ssl_keyfile`` and ``ssl_certfile``: serve TLS (``https://``, ``wss://``)."""
    state = getattr(app, "state", None)
    limit = getattr(state, "max_frame_bytes", MIN_FRAME_BYTES)
    heads = getattr(state, "heads", None)
    http: Any = "auto"
    if heads is not None:
        heads.timeout = header_timeout
        http = gated_protocol(_uvicorn_http(), heads)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws_ping_interval=ping_interval,
        ws_ping_timeout=ping_timeout,
        ws_max_size=limit,
        ws_per_message_deflate=False,  # see above: the guard checks sizes as frames arrive, deflated or not
        timeout_graceful_shutdown=max(1, math.ceil(grace)),
        lifespan="on",
        loop=loop,
        http=http,
        ssl_keyfile=ssl_keyfile,
        ssl_certfile=ssl_certfile,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES + (1 << 20),  # the gate answers a long head first (431)
    )
    redact_token(app)  # after uvicorn set its log handlers up
    return config


def _uvicorn_http() -> type[asyncio.Protocol]:
    """The HTTP protocol uvicorn picks by itself: httptools' where it is installed, else h11's."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


class Server(uvicorn.Server):
    """uvicorn's server with agentenv's shutdown, bounded by ``grace`` seconds.

    On SIGTERM (or ``should_exit``) it stops accepting, closes every session with code 1012 at once,
    cancels the calls in flight (sync tools are abandoned on their threads), and tears every episode
    down; what still runs when the grace is over (an env program that ignores its teardown) is killed.
    With ``watchdog`` (``agentenv serve``), a process still alive ``WATCHDOG_SLACK`` seconds past the
    grace exits regardless, status 1.
    """

    def __init__(self, config: uvicorn.Config, *, grace: float = DEFAULT_SHUTDOWN_GRACE, watchdog: bool = False):
        super().__init__(config)
        self.grace = grace
        self.watchdog = watchdog

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.watchdog and not self.should_exit:
            timer = threading.Timer(self.grace + WATCHDOG_SLACK, _exit_now, args=(self.grace,))
            timer.daemon = True
            timer.start()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        began = time.monotonic()
        for server in self.servers:
            server.close()  # no new connections while the sessions are closed
        app = self.config.app
        if getattr(getattr(app, "state", None), "guard", None) is not None:
            try:
                await asyncio.wait_for(close_sessions(app), self.grace)
            except TimeoutError:
                log.warning(
                    "episodes still tearing down after the shutdown grace of %g s: killed %d env process(es)",
                    self.grace,
                    procs.kill_all(),
                )
        left = self.grace - (time.monotonic() - began)
        self.config.timeout_graceful_shutdown = max(1, math.ceil(left))
        await super().shutdown(sockets)
        procs.kill_all()


def _exit_now(grace: float) -> None:
    killed = procs.kill_all()
    print(
        f"agentenv: shutdown took longer than its grace ({grace:g} s + {WATCHDOG_SLACK:g}); exiting now"
        + (f" (killed {killed} env process(es))" if killed else ""),
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


class _Redact(logging.Filter):
    """Replaces the token in a record's message and arguments, keeping their shape (formatters unpack them)."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and self.secret in record.msg:
            record.msg = record.msg.replace(self.secret, "<token>")
        args = record.args
        if isinstance(args, Mapping):
            record.args = {k: self._clean(v) for k, v in args.items()}
        elif args:
            record.args = tuple(self._clean(v) for v in args)
        if record.exc_text and self.secret in record.exc_text:
            record.exc_text = record.exc_text.replace(self.secret, "<token>")
        return True

    def _clean(self, value: Any) -> Any:
        if value is None or isinstance(value, int | float):
            return value
        if isinstance(value, bytes):
            secret = self.secret.encode()
            return value.replace(secret, b"<token>") if secret in value else value
        if isinstance(value, str):
            return value.replace(self.secret, "<token>") if self.secret in value else value
        text = repr(value)  # a header list, a scope: shown as its repr, without the token
        return text.replace(self.secret, "<token>") if self.secret in text or self.secret in str(value) else value


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


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) for uvicorn to serve from, with Nagle's algorithm off.

    Made with ``IPPROTO_TCP``, not 0: asyncio's loop sets ``TCP_NODELAY`` only on connections it can tell are TCP,
    and with Nagle on, an HTTP answer written in two parts waits for the client's delayed ACK (about 40 ms a
    Task API request on Linux; uvloop sets it either way). ``OSError`` when the address cannot be bound.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted connections inherit it
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


_local: tuple[int, str] | None = None


def local_token() -> str:
    """This process's token for the servers it runs for itself (``AgentEnv.local``, ``agentenv eval BUNDLE_DIR``):
    random, made once per process (a forked child makes its own), and handed to their clients in memory
    (``Shared(bearer=...)``), never through the environment, so that the programs an episode runs cannot read it.

    A server on loopback without a token answers any program or web page on the machine; with this one, only the
    process that started it.
    """
    global _local
    if _local is None or _local[0] != os.getpid():
        _local = (os.getpid(), secrets.token_urlsafe(32))
    return _local[1]


class ServerThread:
    """An app served by uvicorn in a daemon thread on a loopback port (0: any free port)."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, **config: Any) -> None:
        self._sock = listening_socket(host, port)
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.server = Server(
            uvicorn_config(app, host=host, port=self.port, **config), grace=config.get("grace", DEFAULT_SHUTDOWN_GRACE)
        )
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
        """Shut down: clients are told the service restarts (1012), every episode is torn down (within the grace)."""
        if self._thread.is_alive():
            self.server.should_exit = True
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
