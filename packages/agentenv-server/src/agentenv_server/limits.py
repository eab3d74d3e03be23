"""File descriptors as capacity: the limit raised at start, the sessions sized to it, and a check per new session.

A session holds its socket, plus four descriptors per subprocess env it runs (``agentenv.sandbox.procs``) and
a few while a bash call runs. ``build_app`` raises the soft ``RLIMIT_NOFILE`` to the hard limit, and serves
no more sessions than the limit leaves room for (saying so). Each new session is checked against the
descriptors open right now (an env may open files of its own): past the room left, it is refused with
``OUT_OF_RESOURCES`` before anything is deployed, so the server never runs out mid-episode. asyncio's
``socket.accept() out of system resource`` errors, should the process still run out, are logged once
per ``ACCEPT_LOG_SECONDS`` with a count instead of once per attempt.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from agentenv.bundle import Bundle
from agentenv.sandbox import FDS_PER_CHILD

__all__ = ["FdBudget", "QuietAcceptErrors", "fds_per_session", "open_fds", "raise_fd_limit"]

log = logging.getLogger("agentenv.server")

RESERVE = 64  # descriptors kept free for the server itself: its listening socket, logs, Task API requests
BASH_FDS = FDS_PER_CHILD  # while a bash call runs
# Counting the open descriptors costs about 2.5 us each (26 ms at 10,000): below 1 ms a count, every new session is
# counted; above, at most once per 40 times what a count costs (under 2.5% of a core), an estimate kept in between.
# The cost is reckoned from the number counted, not from a clock: on a busy machine a small count can take over
# 1 ms, and a count skipped then let a session in after another had used up the descriptors.
COUNT_SECONDS_PER_FD = 2.5e-6
CHEAP_COUNT_SECONDS = 0.001
COUNT_SPACING = 40.0
ACCEPT_LOG_SECONDS = 10.0

try:
    import resource
except ImportError:  # not POSIX: no limits to raise or count
    resource = None  # type: ignore[assignment]


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one; returns (before, now). (0, 0) where unknown."""
    if resource is None:
        return 0, 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # some systems refuse the full hard limit (macOS: OPEN_MAX)
        return soft, soft
    return soft, target


def open_fds() -> int | None:
    """How many descriptors this process has open (None where /proc or /dev/fd cannot tell; a huge number when
    there is not one left to look with)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # less the one listdir itself opened
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                return 1 << 30
            continue
    return None


def fds_per_session(bundle: Bundle) -> int:
    """Descriptors one session may hold: its socket, the pipes of its subprocess envs, a running bash call."""
    most = 0
    seen: set[str] = set()
    for task in bundle.tasks:
        key = bundle.toolset_key(task)
        if key in seen:
            continue
        seen.add(key)
        toolset = bundle.toolset(task)
        kinds = [bundle.envs[name].kind for name in toolset.envs]
        need = sum(FDS_PER_CHILD for kind in kinds if kind != "python")  # any other kind may run a program
        most = max(most, need + (BASH_FDS if toolset.bash else 0))
    return 1 + most


@dataclass
class FdBudget:
    """The descriptors the server may use (``limit``), and what a session costs (``per_session``)."""

    limit: int
    per_session: int
    raised_from: int = 0
    spare: int = 0  # kept aside for connections that have not sent a request head yet (connections.HeadGate)
    _sampled: int = 0
    _next_count_at: float = field(default=-1e9)
    _since: int = 0  # sessions admitted since the last count
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def at_start(cls, per_session: int) -> FdBudget:
        """Raise the limit and measure it; a sixteenth of it (16 to 1024) is kept aside for connections that have not
        sent a request head yet."""
        before, now = raise_fd_limit()
        spare = min(1024, max(16, now // 16)) if now > 0 else 256
        return cls(limit=now, per_session=per_session, raised_from=before if before != now else 0, spare=spare)

    def room(self, open_now: int | None = None) -> int:
        """How many more sessions fit (a large number where the limit is unknown)."""
        if self.limit <= 0:
            return 1 << 30
        used = open_now if open_now is not None else (open_fds() or 0)
        return max(0, (self.limit - RESERVE - self.spare - used) // self.per_session)

    def sessions(self, requested: int, open_now: int | None = None) -> int:
        """``requested``, or fewer when the limit has no room for that many sessions."""
        return max(1, min(requested, self.room(open_now)))

    def admit(self, waiting: int = 0) -> bool:
        """Whether a new session fits in the descriptors left (see ``CHEAP_COUNT_SECONDS`` for how often they are
        counted). ``waiting``: connections without a request head now, whose descriptors come out of ``spare``."""
        if self.limit <= 0:
            return True
        with self._lock:
            now = time.monotonic()
            if now >= self._next_count_at:
                counted = open_fds()
                if counted is None:
                    return True
                counted = max(0, counted - min(waiting, self.spare))
                # full (or no descriptor left to count with, which costs nothing): look again at the next session
                cost = 0.0 if counted >= self.limit else counted * COUNT_SECONDS_PER_FD
                self._sampled, self._since = counted, 0
                self._next_count_at = now if cost < CHEAP_COUNT_SECONDS else now + COUNT_SPACING * cost
            estimate = self._sampled + self._since * self.per_session
            if estimate + self.per_session + RESERVE + self.spare > self.limit:
                return False
            self._since += 1
            return True

    def refusal(self) -> str:
        """The message of an ``OUT_OF_RESOURCES`` refusal."""
        used = min(self._sampled + self._since * self.per_session, self.limit)
        return (
            f"the server is out of file descriptors ({used} of its limit of {self.limit} in use; a session needs "
            f"about {self.per_session}): this session was not opened. Wait for sessions to end, or raise the server's "
            "limit (ulimit -n, systemd LimitNOFILE=) or lower --max-concurrent-envs"
        )

    def describe(self, capacity: int) -> str:
        """A line for the start-up log: the limit, the cost of a session, the room."""
        raised = f" (raised from {self.raised_from})" if self.raised_from else ""
        if self.limit <= 0:
            return f"capacity {capacity} sessions; file descriptors: no limit known"
        return (
            f"capacity {capacity} sessions; file descriptors: limit {self.limit}{raised}, about {self.per_session} per "
            f"session, room for {self.room()}"
        )


class QuietAcceptErrors(logging.Filter):
    """Keeps asyncio's accept errors from flooding the log when the process is out of file descriptors.

    On ``EMFILE`` asyncio's accept loop logs ``socket.accept() out of system resource`` and schedules a retry
    once per connection it tried (up to the listen backlog, 2048 with uvicorn) and again every second; once the
    listening socket is closed, each retry still pending logs a ``ValueError`` traceback. This lets the first
    accept error through, then one per ``seconds`` with a count, and drops the tracebacks of those retries.
    """

    MESSAGE = "socket.accept() out of system resource"
    RETRY = "BaseSelectorEventLoop._start_serving"

    def __init__(self, seconds: float = ACCEPT_LOG_SECONDS) -> None:
        super().__init__()
        self.seconds = seconds
        self.last = -1e9
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if self.RETRY in text:
            self.dropped += 1
            return False
        if self.MESSAGE not in text:
            return True
        now = time.monotonic()
        if now - self.last < self.seconds:
            self.dropped += 1
            return False
        record.msg = (
            f"{self.MESSAGE}: the server ran out of file descriptors and stops accepting for a second at a time"
            + (f" ({self.dropped} more such errors since the last report)" if self.dropped else "")
            + ". Raise its limit (ulimit -n, systemd LimitNOFILE=) or lower --max-concurrent-envs"
        )
        record.args, record.exc_info, record.exc_text = (), None, None
        self.last, self.dropped = now, 0
        return True

    @classmethod
    def install(cls) -> None:
        """Put one on the ``asyncio`` logger (once per process)."""
        logger = logging.getLogger("asyncio")
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())
