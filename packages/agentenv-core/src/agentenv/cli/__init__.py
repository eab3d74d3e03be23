"""The ``agentenv`` command: its parser, its own commands and those plugins add (``CliCommand`` records).

A plugin's command prints its rows as the CLI's own do, with ``table(rows, header)``.

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "ELSEWHERE": "entry",
    "build_parser": "entry",
    "main": "entry",
    "QAReport": "qa",
    "qa_bundle": "qa",
    "run_qa": "qa",
    "table": ".text",
}

__all__ = [
    "ELSEWHERE",
    "QAReport",
    "build_parser",
    "main",
    "qa_bundle",
    "run_qa",
    "table",
]

if TYPE_CHECKING:
    from agentenv.cli.entry import ELSEWHERE, build_parser, main
    from agentenv.cli.qa import QAReport, qa_bundle, run_qa
    from agentenv.text import table


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
