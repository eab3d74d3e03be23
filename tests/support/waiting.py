"""The one way the tests wait for something another process or thread makes true: poll, with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 60.0, interval: float = 0.05) -> T:
    """Call ``check`` every ``interval`` seconds until what it returns is true or ``timeout`` seconds passed; what
    it returned last (true: it held in time). The caller asserts on it and says what it waited for."""
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(interval)
    return value


async def until(check: Callable[[], object], timeout: float = 10.0, interval: float = 0.01) -> None:
    """``wait_until`` on the event loop (the loop keeps running what the check waits for); fails after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"still not true after {timeout} s"
        await asyncio.sleep(interval)
