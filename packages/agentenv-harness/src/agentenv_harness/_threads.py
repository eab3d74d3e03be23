"""The threads the harness runs beside a trainer: an event loop for episodes and agents, and a loopback server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["BackgroundLoop", "LoopbackServer"]

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio event loop in a daemon thread; synchronous callers (TRL's pool threads) submit coroutines to it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a future other threads can wait on."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (never from the loop's own thread)."""
        if self.on_loop():
            coro.close()
            raise RuntimeError("a blocking call was made from the harness's own event loop; await it instead")
        return self.submit(coro).result(timeout)

    def on_loop(self) -> bool:
        """Whether the caller runs on the loop's thread."""
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Stop the loop and join its thread (tasks still pending are left to the process's exit)."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.on_loop():
            self._thread.join(10)
            if not self._thread.is_alive():
                self.loop.close()


class LoopbackServer:
    """An ASGI app served by uvicorn on ``127.0.0.1`` (a free port) in a daemon thread of its own."""

    def __init__(self, app: Any, *, name: str, timeout: float = 30.0) -> None:
        import uvicorn
        from agentenv_server.runner import listening_socket

        sock = listening_socket("127.0.0.1", 0)  # Nagle off: a small JSON answer must not wait for a delayed ACK
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._error: BaseException | None = None

        def serve() -> None:
            try:
                self._server.run(sockets=[sock])
            except BaseException as exc:  # shown by the constructor
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=serve, name=name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"{name} did not start on {self.url}: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start on {self.url} within {timeout:g} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
