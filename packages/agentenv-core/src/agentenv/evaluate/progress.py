"""The live progress of a run: a bar redrawn in place on a terminal, a line now and then anywhere else (a log file,
CI), each with the samples done, scored and failed, the mean reward so far and the elapsed time."""

from __future__ import annotations

import statistics
import sys
import time
from typing import TextIO

from agentenv.evaluate.results import Sample

__all__ = ["Progress"]

WIDTH = 24  # characters of the bar


class Progress:
    """Counts finished samples of ``total`` (``done`` already finished before this run, e.g. on ``--resume``)."""

    def __init__(self, total: int, *, done: int = 0, stream: TextIO | None = None, every: float = 30.0) -> None:
        self.total = total
        self.done = done
        self.resumed = done
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every  # seconds between lines when not live (and every tenth of the run)
        self.began = time.monotonic()
        self.scored = self.failed = 0
        self.rewards: list[float] = []
        self._last = 0.0
        self._shown = -1  # the count of the last line shown
        self._last_tenth = done * 10 // max(total, 1)

    def line(self) -> str:
        """The progress as one line."""
        share = self.done / self.total if self.total else 1.0
        filled = int(share * WIDTH)
        bar = "=" * filled + (">" if filled < WIDTH else "") + " " * max(0, WIDTH - filled - 1)
        mean = f"{statistics.fmean(self.rewards):.3f}" if self.rewards else "-"
        elapsed = time.monotonic() - self.began
        played = self.done - self.resumed
        left = (self.total - self.done) * elapsed / played if played else None
        eta = f", ~{left:.0f} s left" if left is not None and self.done < self.total else ""
        return (
            f"eval [{bar}] {self.done}/{self.total} samples, {self.scored} scored, {self.failed} failed, "
            f"mean reward {mean}, {elapsed:.0f} s{eta}"
        )

    def start(self) -> None:
        """Show the first line."""
        self._show(force=True)

    def update(self, sample: Sample) -> None:
        """Count a finished sample and show the progress when due."""
        self.done += 1
        if sample.outcome == "scored" and sample.reward is not None:
            self.scored += 1
            self.rewards.append(sample.reward)
        elif sample.outcome == "failed":
            self.failed += 1
        self._show()

    def close(self) -> None:
        """Show the last line (and end the live one)."""
        self._show(force=True)
        if self.live:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self, force: bool = False) -> None:
        now = time.monotonic()
        if force and self._shown == self.done:
            return
        if self.live:
            if force or now - self._last >= 0.1:
                self.stream.write("\r" + self.line() + "\x1b[K")
                self.stream.flush()
                self._last, self._shown = now, self.done
            return
        tenth = self.done * 10 // max(self.total, 1)
        if force or tenth > self._last_tenth or now - self._last >= self.every:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last, self._last_tenth, self._shown = now, tenth, self.done
