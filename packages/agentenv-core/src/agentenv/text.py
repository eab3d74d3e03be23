"""Plain text for a terminal: the aligned tables the CLI and ``agentenv eval`` print."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["table"]


def table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain text table: the header, a rule, then one line per row, columns aligned; None prints empty."""
    cells = [[str(c) for c in header], *[[("" if c is None else str(c)) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
