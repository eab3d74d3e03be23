"""The pipes of a program ``agentenv.sandbox.procs`` starts: raw descriptors this process owns, watched on the loop.

Why not the loop's pipe transports (``connect_read_pipe``): they take a file object, and asyncio and uvloop
disagree about who closes its descriptor. uvloop's libuv closes the descriptor itself; if the connect is
cancelled before the file object is attached, the file object still holds the number and closes it again when
it is collected, by then another socket's number: libuv then aborts the whole process (a client that dropped
its connection while its reset started an env program took ``agentenv serve`` down). Here each descriptor has
one owner, this module: it is registered with ``add_reader``/``add_writer`` (no await anywhere, so nothing can
be cancelled half way), unregistered, and closed exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

__all__ = ["ReadEnd", "WriteEnd"]

CHUNK = 65536


class _End:
    """One end of a pipe: its descriptor (non-blocking), closed once by ``close()``."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        os.set_blocking(fd, False)
        self.fd: int | None = fd
        self.loop = loop

    def _release(self) -> None:
        """Unregister the descriptor from the loop, then close it (the order libuv's epoll needs)."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        with contextlib.suppress(Exception):  # a closed loop has nothing registered any more
            self.loop.remove_reader(fd)
        with contextlib.suppress(Exception):
            self.loop.remove_writer(fd)
        os.close(fd)

    def is_closing(self) -> bool:
        return self.fd is None


class ReadEnd(_End):
    """The read end: each chunk goes to ``received``, the end of input to ``ended`` (once, also on ``close()``).

    It doubles as the transport of an ``asyncio.StreamReader`` (``pause_reading``/``resume_reading``), so a
    program that writes faster than it is read is paused at the reader's limit instead of filling memory.
    """

    def __init__(
        self, fd: int, loop: asyncio.AbstractEventLoop, received: Callable[[bytes], None], ended: Callable[[], None]
    ) -> None:
        super().__init__(fd, loop)
        self._received = received
        self._ended: Callable[[], None] | None = ended
        self._paused = False
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        if self.fd is None:
            return
        try:
            data = os.read(self.fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # EIO and the like: the other end is gone
            data = b""
        if data:
            self._received(data)
        else:
            self.close()

    def pause_reading(self) -> None:
        if self.fd is not None and not self._paused:
            self._paused = True
            self.loop.remove_reader(self.fd)

    def resume_reading(self) -> None:
        if self.fd is not None and self._paused:
            self._paused = False
            self.loop.add_reader(self.fd, self._readable)

    def close(self) -> None:
        """Stop reading and close the descriptor; ``ended`` is called (once)."""
        self._release()
        ended, self._ended = self._ended, None
        if ended is not None:
            ended()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default  # StreamReader asks for nothing, but a transport has this


class WriteEnd(_End):
    """The write end: ``write`` sends what it can now and the rest as the program reads."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(fd, loop)
        self._pending = bytearray()

    def write(self, data: bytes) -> None:
        """Queue ``data``; ``BrokenPipeError`` once the program closed its end (or ``close()`` was called)."""
        if self.fd is None:
            raise BrokenPipeError("the pipe is closed")
        if self._pending:
            self._pending += data
            return
        self._pending += data
        self._flush()
        if self.fd is None:
            raise BrokenPipeError("the program closed its standard input")
        if self._pending:
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        self._flush()
        if self.fd is not None and not self._pending:
            self.loop.remove_writer(self.fd)

    def _flush(self) -> None:
        while self._pending and self.fd is not None:
            try:
                sent = os.write(self.fd, self._pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EPIPE: the reader is gone; what was queued cannot arrive
                self._pending.clear()
                self.close()
                return
            del self._pending[:sent]

    def close(self) -> None:
        """Drop what was not sent and close the descriptor."""
        self._pending.clear()
        self._release()
