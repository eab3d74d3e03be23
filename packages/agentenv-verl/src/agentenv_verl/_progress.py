"""A plain-text progress bar for the writers (stderr; a counter when the total is unknown)."""

from __future__ import annotations

from typing import TextIO

__all__ = ["Bar"]


class Bar:
    """A plain-text progress bar on a stream (a counter when the total is unknown); no stream: nothing drawn."""

    def __init__(self, stream: TextIO | None, label: str, total: int | None) -> None:
        self.stream, self.label, self.total, self.done = stream, label, total, 0
        self._draw()

    def step(self) -> None:
        """One more done."""
        self.done += 1
        self._draw()

    def _draw(self) -> None:
        if self.stream is None:
            return
        if self.total:
            filled = round(20 * self.done / self.total)
            text = f"{self.label} [{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total}"
        else:
            text = f"{self.label}: {self.done}"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()
            self.stream = None
