"""Where in the author's code an env's exception came from: the file and line a failure names, and its traceback.

A bundle's tool, deploy or verifier that raises is the env's fault (the episode fails, never trained on); the
author can only fix it knowing where, so the failure names the innermost frame in the bundle's folder (else the
innermost frame: a plugin's env kind), and the whole traceback goes to the log and to ``agentenv play``.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Blame", "blame"]


@dataclass(frozen=True)
class Blame:
    """An exception as a failure tells it: ``what`` (``KeyError: 'e99'``), ``where`` (``db_env.py:14 in lookup``,
    or empty when no frame is known) and ``text`` (the formatted traceback)."""

    what: str
    where: str
    text: str

    def said(self) -> str:
        """``what`` with ``where`` after it in parentheses."""
        return f"{self.what} ({self.where})" if self.where else self.what


def blame(exc: BaseException, bundle_dir: Path) -> Blame:
    """Blame ``exc`` on the innermost frame of its traceback in ``bundle_dir`` (shown relative to it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    root = bundle_dir.resolve()
    ours = [i for i, frame in enumerate(frames) if _inside(frame.filename, root)]
    if ours:
        chosen = frames[ours[-1]]
        where = f"{Path(chosen.filename).resolve().relative_to(root).as_posix()}:{chosen.lineno} in {chosen.name}"
        # from the author's first frame on: agentenv's frames above it are not theirs to fix
        shown = traceback.StackSummary.from_list(frames[ours[0] :])
    else:
        shown = frames
        where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    lines = ["Traceback (most recent call last):\n", *shown.format(), *traceback.format_exception_only(exc)]
    return Blame(f"{type(exc).__name__}: {exc}", where, "".join(lines))


def _inside(filename: str, root: Path) -> bool:
    path = Path(filename)
    return path.is_absolute() and path.resolve().is_relative_to(root)
