"""The demo's files and progress display: metrics CSV, report JSON and PNG from a report; lines off a terminal."""

from __future__ import annotations

import csv
import io
import json

from agentenv_trl.demo_outputs import write_outputs
from agentenv_trl.demo_plot import plot_reports, smooth
from agentenv_trl.demo_progress import Progress
from agentenv_trl.demo_report import STEP_COLUMNS, DemoReport, EvalRow, StepRow

PNG = b"\x89PNG\r\n\x1a\n"


def report(source: str = "env", seed: int = 0, steps: int = 12) -> DemoReport:
    out = DemoReport(bundle="arith", model="tiny", seed=seed, reward_source=source, warm_start_steps=5,
                     warm_start_loss=0.5)  # fmt: skip
    for i in range(1, steps + 1):
        reward = None if i == 3 else i / steps  # a step where nothing was scored
        out.steps.append(StepRow(i, 32, 32 if reward is not None else 0, 0, reward, 0.1, reward, 1.5, 0.8))
    out.evals = [
        EvalRow("before GRPO", 128, 128, 0, 0.2, 0.05, 0.2, 1.4, 3.0),
        EvalRow("after GRPO", 128, 128, 0, 0.6, 0.05, 0.6, 2.0, 3.0),
    ]
    return out


def test_write_outputs_writes_the_steps_csv_the_report_and_the_picture(tmp_path):
    written = write_outputs(report(), tmp_path / "run")
    assert [p.name for p in written] == ["steps.csv", "report.json", "reward.png"]
    with (tmp_path / "run" / "steps.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == STEP_COLUMNS and len(rows) == 13
    assert rows[3][STEP_COLUMNS.index("reward")] == ""  # nothing scored: an empty cell, not "None"
    assert DemoReport.from_dict(json.loads((tmp_path / "run" / "report.json").read_text())) == report()
    assert (tmp_path / "run" / "reward.png").read_bytes()[:8] == PNG


def test_the_picture_draws_both_arms_over_several_seeds(tmp_path):
    arms = {"env": [report("env", s) for s in range(3)], "shuffled": [report("shuffled", s, 10) for s in range(3)]}
    path = plot_reports(arms, tmp_path / "both.png", title="two arms")
    assert path == tmp_path / "both.png" and path.read_bytes()[:8] == PNG


def test_smoothing_is_a_trailing_mean_that_skips_missing_steps():
    assert smooth([1.0, None, 3.0, 5.0], 2) == [1.0, 1.0, 3.0, 4.0]
    assert smooth([None, None], 3) == [None, None]


def test_progress_off_a_terminal_prints_a_whole_line_each_tenth_and_at_the_end():
    stream = io.StringIO()
    with Progress(25, "GRPO", stream) as bar:
        for step in range(25):
            bar.update(1, reward=f"{step / 25:.2f}")
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert [line.split()[1] for line in lines] == ["3/25", "6/25", "9/25", "12/25", "15/25", "18/25", "21/25",
                                                   "24/25", "25/25"]  # fmt: skip
    assert lines[-1].startswith("GRPO  25/25  100%") and lines[-1].endswith("reward=0.96")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place():
    stream = Terminal()
    with Progress(4, "eval before GRPO", stream) as bar:
        for _ in range(4):
            bar.update(1)
    assert "\r" in stream.getvalue() and "4/4" in stream.getvalue()
