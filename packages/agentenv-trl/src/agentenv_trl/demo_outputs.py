"""What a demo run leaves in its folder: the steps as CSV, the report as JSON, each eval's summary, the picture."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

from agentenv.evaluate import Summary
from agentenv.files import write_file

from .demo_plot import plot_reports
from .demo_report import STEP_COLUMNS, DemoReport, fmt, summary_file

__all__ = ["write_outputs"]


def write_outputs(report: DemoReport, folder: Path, summaries: dict[str, Summary] | None = None) -> list[Path]:
    """Write ``steps.csv``, ``report.json``, ``reward.png`` and each eval's ``summary_file`` into ``folder``.

    Returns the paths written. The picture needs matplotlib (the ``demo`` extra); without it the
    others are still written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(STEP_COLUMNS)
    for row in report.steps:
        writer.writerow(["" if v is None else v for v in dataclasses.astuple(row)])
    steps = write_file(folder / "steps.csv", table.getvalue())
    data = write_file(folder / "report.json", json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    written = [steps, data]
    for when, summary in (summaries or {}).items():
        summary.write(folder / summary_file(when))
        written.append(folder / summary_file(when))
    picture = plot_reports({report.reward_source: [report]}, folder / "reward.png", title=_title(report))
    if picture is not None:
        written.append(picture)
    return written


def _title(report: DemoReport) -> str:
    before, after = report.eval_reward("before GRPO"), report.eval_reward("after GRPO")
    evals = f": eval {fmt(before)} -> {fmt(after)}" if before is not None and after is not None else ""
    return f"agentenv demo, {report.bundle}, seed {report.seed}{evals}"
