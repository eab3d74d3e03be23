"""Closing every ``AgentEnv`` at exit and on SIGTERM, so no episode or local server outlives the trainer."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import weakref
from typing import Any, Protocol

__all__ = ["Closable", "live", "stop_on_sigterm", "track"]


class Closable(Protocol):
    """What is closed at exit: an ``AgentEnv`` (typed so, this module need not know it)."""

    def close(self) -> None: ...


log = logging.getLogger("agentenv.trl")

live: weakref.WeakSet[Closable] = weakref.WeakSet()
_owner_pid = os.getpid()
_hooks_lock = threading.Lock()
_atexit_registered = False
_previous_sigterm: Any = None
_sigterm_installed = False


def track(env: Closable) -> None:
    """Close ``env`` at interpreter exit (with every other live one)."""
    global _atexit_registered, _owner_pid
    with _hooks_lock:
        live.add(env)
        if not _atexit_registered:
            _owner_pid = os.getpid()
            # Before interpreter shutdown refuses new thread-pool work (which a local server's teardowns need):
            # threading runs these hooks ahead of concurrent.futures' own, and ahead of atexit.
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                register(close_all)
            atexit.register(close_all)  # where that hook does not exist; closing twice is a no-op
            _atexit_registered = True


def close_all() -> None:
    """Close every AgentEnv of this process (a forked child must not close its parent's sessions)."""
    if os.getpid() != _owner_pid:
        return
    for env in list(live):
        try:
            env.close()
        except Exception:  # closing at exit is best effort: one failure must not keep the others open
            log.exception("closing %r failed", env)


def stop_on_sigterm() -> None:
    """On SIGTERM, close every AgentEnv (ending episodes, stopping local servers), then die of the signal as before."""
    global _previous_sigterm, _sigterm_installed
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; at-exit closing still applies
    with _hooks_lock:
        if _sigterm_installed:
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN:
            return  # the process chose to ignore SIGTERM; so do we
        _previous_sigterm = previous
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    close_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
