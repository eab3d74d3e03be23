"""``Recorder``: episode records appended to a folder of JSON-lines shards, off the caller's thread."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentenv.errors import AgentEnvError
from agentenv.files import append, open_log
from agentenv.logs import warn_once
from agentenv.record.build import episode_record

if TYPE_CHECKING:
    from agentenv.engine.episode import Episode
    from agentenv.wire import EpisodeResult

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_SHARD_BYTES", "FIELDS", "SHARD_GLOB", "Recorder"]

log = logging.getLogger("agentenv.record")

DEFAULT_MAX_BYTES: Final = 10 * 1024**3  # the folder's bound: 10 GiB, then the oldest shards go
DEFAULT_SHARD_BYTES: Final = 64 * 1024**2
MIN_MAX_BYTES: Final = 64 * 1024
SHARD_GLOB: Final = "records-*.jsonl"
QUEUE_LINES: Final = 10_000  # records waiting for the disk; past it, records are dropped (and counted), never waited on
# what a record holds, in the order it is written (docs/records.md says what each means)
FIELDS: Final = (
    "record",
    "id",
    "rollout",
    "attempt",
    "earlier",
    "client",
    "step",
    "bundle",
    "task",
    "split",
    "index",
    "purpose",
    "system",
    "tools",
    "turns",
    "steps",
    "outcome",
    "reward",
    "reason",
    "failure",
    "started",
    "ended",
    "seconds",
)
_STOP: Final = b""


class Recorder:
    """Appends records (one JSON object each) to ``folder`` as shards of JSON lines.

    ``add`` never blocks on the disk and never raises: a writer thread appends each line whole and flushes it to disk
    (``agentenv.files.append``); a record that cannot be written (a full disk, a folder gone) is dropped, counted in
    ``dropped`` and warned about once. A shard holds up to ``shard_bytes`` (default: 64 MiB, or an eighth of
    ``max_bytes`` when that is less); every process writes shards of its own (``records-TIME-PID-N.jsonl``), so
    several replicas may share one folder. When the folder's shards would pass ``max_bytes``, the oldest are removed.
    ``flag`` names the option that chose the folder, for messages.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        shard_bytes: int | None = None,
        flag: str = "--record",
    ) -> None:
        if max_bytes < MIN_MAX_BYTES:
            raise AgentEnvError(f"{flag}-max-bytes {max_bytes}: give at least {MIN_MAX_BYTES} bytes (a few records)")
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise AgentEnvError(f"{flag} {self.folder}: cannot make the folder ({why}); give another") from None
        if not os.access(self.folder, os.W_OK | os.X_OK):
            raise AgentEnvError(f"{flag} {self.folder}: this user cannot write there; give a folder it can write")
        self.max_bytes = int(max_bytes)
        self.shard_bytes = int(shard_bytes or min(DEFAULT_SHARD_BYTES, max(MIN_MAX_BYTES // 2, self.max_bytes // 8)))
        self.flag = flag
        self.written = 0
        self.dropped = 0
        self._queue: queue.Queue[bytes] = queue.Queue(QUEUE_LINES)
        self._fd = -1
        self._shard_size = 0
        self._total = 0
        self._sequence = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- the caller's side -----------------------------------------------------------------------

    def add(self, record: Mapping[str, Any]) -> None:
        """Queue ``record`` for writing; returns at once (a record that cannot be encoded or queued is dropped)."""
        try:
            line = _encode(record)
        except (TypeError, ValueError) as exc:
            self._drop(1, f"a record that is not JSON was dropped ({exc})")
            return
        with self._lock:
            if self._closed:
                self._drop(1, "a record came after the recorder closed; it was dropped")
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentenv-record", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._drop(1, f"{QUEUE_LINES} records are waiting for the disk under {self.folder}; records are dropped")

    def episode_ended(self, episode: Episode, result: EpisodeResult) -> None:
        """Add the record of ``episode`` (an ``agentenv.Episode``: ``Episode(on_end=recorder.episode_ended)``) when a
        policy played it; probes and checks are not recorded."""
        if episode.purpose == "play":
            self.add(episode_record(episode, result))

    def flush(self) -> None:
        """Wait until every record added so far is on disk (or dropped)."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Write what is queued, close the shard and stop the writer thread (later records are dropped)."""
        with self._lock:
            self._closed, thread = True, self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- the writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 256:
                    batch.append(self._queue.get_nowait())
            lines = [line for line in batch if line != _STOP]
            try:
                if lines:
                    self._write(lines)
            except Exception as exc:  # never let the thread die: the next record gets a new shard
                self._drop(len(lines), f"records could not be written under {self.folder}: {exc}")
                self._close_shard()
            finally:
                for _ in batch:
                    self._queue.task_done()
            if len(lines) < len(batch):
                return

    def _write(self, lines: list[bytes]) -> None:
        ready: list[bytes] = []
        for line in lines:
            if len(line) > self.max_bytes:
                self._drop(1, f"a record of {len(line)} bytes is over {self.flag}-max-bytes {self.max_bytes}")
                continue
            full = self._shard_size + len(line) > self.shard_bytes or self._total + len(line) > self.max_bytes
            if self._fd < 0 or full:
                if ready:
                    append(self._fd, ready)
                    ready = []
                self._rotate(len(line))
            ready.append(line)
            self._shard_size += len(line)
            self._total += len(line)
            self.written += 1
        if ready:
            append(self._fd, ready)
        if os.fstat(self._fd).st_nlink == 0:  # the shard (or its folder) was removed meanwhile: those lines are gone
            self._close_shard()
            self.written -= len(lines)
            raise FileNotFoundError(f"the shard being written was removed, with {len(lines)} record(s)")

    def _rotate(self, need: int) -> None:
        """Start a new shard, first removing the oldest ones while the folder would pass ``max_bytes``."""
        self._close_shard()
        shards = sorted(self.folder.glob(SHARD_GLOB))
        sizes = {p: _size(p) for p in shards}
        total = sum(sizes.values())
        while shards and total + need > self.max_bytes:
            oldest = shards.pop(0)
            with contextlib.suppress(FileNotFoundError):
                oldest.unlink()
            total -= sizes[oldest]
            warn_once(
                log,
                f"bound:{self.folder}",
                "records under %s reached %s-max-bytes %d: the oldest shards are removed (%s)",
                self.folder,
                self.flag,
                self.max_bytes,
                oldest.name,
            )
        self._sequence += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._fd = open_log(self.folder / f"records-{stamp}-{os.getpid()}-{self._sequence:05d}.jsonl")
        self._shard_size, self._total = 0, total

    def _close_shard(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        warn_once(log, f"drop:{self.folder}:{why[:40]}", "%s (episodes are not affected)", why)


def _encode(record: Mapping[str, Any]) -> bytes:
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return (text + "\n").encode()
    except UnicodeEncodeError:  # a lone surrogate from a JSON frame: kept as its \\u escape
        return (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
