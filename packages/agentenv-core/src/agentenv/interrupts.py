"""Running a command's event loop so that Ctrl-C stops it, whichever of the process's threads the signal lands on.

The kernel hands a process's SIGINT to any thread that does not block it. ``asyncio.run`` handles Ctrl-C with a
plain ``signal.signal`` handler, which Python runs in the main thread only once that thread runs bytecode again: a
main thread asleep in its loop's ``select`` with nothing due (every task waiting on a model that stalls) sleeps on
when the signal lands on one of the tool, server or executor threads, and Ctrl-C does nothing. The loop's own signal
handling (``loop.add_signal_handler``) also sets Python's wakeup fd, which any thread's signal writes to, waking the
loop wherever the signal landed. ``agentenv eval`` once ignored a Ctrl-C for over a minute this way.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with Ctrl-C cancelling ``main`` (its cleanup runs) and raising ``KeyboardInterrupt``
    wherever the signal lands; a second Ctrl-C raises at once. Off the main thread, plain ``asyncio.run``."""
    return asyncio.run(_interruptible(main))


async def _interruptible(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        loop.remove_signal_handler(signal.SIGINT)  # the next Ctrl-C is Python's own: KeyboardInterrupt at once
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or a loop without signals
        return await main
    try:
        return await main
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        if not interrupted:
            loop.remove_signal_handler(signal.SIGINT)
