"""Progress for the demo's phases: a bar on a terminal, a line every tenth of the way anywhere else.

A carriage-return bar written to a log or CI output is one unreadable line; there each update that
crosses the next tenth prints a full line instead (``warm start  120/600  20%  14 s  loss=0.412``).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """A progress display for ``total`` units of ``desc``, on ``stream`` (standard error by default).

    ``lines``: how many periodic lines a non-terminal stream gets (besides the last one).
    """

    def __init__(self, total: int, desc: str, stream: TextIO | None = None, *, lines: int = 10) -> None:
        self.total = max(total, 0)
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.status: dict[str, Any] = {}
        self._began = time.monotonic()
        self._every = max(1, -(-self.total // max(lines, 1)))  # ceil: at most `lines` lines before the end
        self._next = self._every
        self._bar: Any = None
        isatty = getattr(self.stream, "isatty", None)
        if callable(isatty) and isatty():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, file=self.stream, dynamic_ncols=True, leave=True)

    def update(self, n: int = 1, **status: Any) -> None:
        """``n`` more units done; ``status`` (e.g. ``loss=0.41``) is shown with the count."""
        self.done += n
        self.status.update(status)
        if self._bar is not None:
            if status:
                self._bar.set_postfix(self.status, refresh=False)
            self._bar.update(n)
            return
        if self.done >= self._next or self.done >= self.total:
            while self._next <= self.done:
                self._next += self._every
            self._line()

    def close(self) -> None:
        """End the display (a terminal bar is left in place)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _line(self) -> None:
        width = len(str(self.total))
        share = f"{100 * self.done / self.total:3.0f}%" if self.total else ""
        status = "  ".join(f"{k}={v}" for k, v in self.status.items())
        elapsed = time.monotonic() - self._began
        line = f"{self.desc}  {self.done:>{width}}/{self.total}  {share}  {elapsed:.0f} s  {status}".rstrip()
        print(line, file=self.stream, flush=True)
