"""Warnings said once per key and process, then kept to the info log (a training run repeats them)."""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["warn_once"]

_said: set[str] = set()
_lock = threading.Lock()


def warn_once(logger: logging.Logger, key: str, message: str, *args: Any) -> bool:
    """Log ``message`` as a warning the first time ``key`` is seen in this process, as info after.

    Returns whether it was the first time.
    """
    with _lock:
        first = key not in _said
        _said.add(key)
    logger.log(logging.WARNING if first else logging.INFO, message, *args)
    return first
