"""The demo's picture: train reward per GRPO step (each run, and a smoothed curve) and the eval reward before and after.

Needs matplotlib (``pip install 'agentenv-trl[demo]'``); drawn without pyplot, so no GUI backend is
chosen and no global state changes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentenv.files import staged

if TYPE_CHECKING:
    from .demo_report import DemoReport

__all__ = ["ARM_LABELS", "plot_reports", "smooth"]

ARM_LABELS = {
    "env": "GRPO on the env's reward",
    "shuffled": "control: reward shuffled within each group",
    "constant": "control: constant reward",
}
_COLORS = {"env": "#1f77b4", "shuffled": "#7f7f7f", "constant": "#bcbd22"}


def smooth(values: Sequence[float | None], window: int) -> list[float | None]:
    """The trailing mean over the last ``window`` values (missing values skipped; None where all are missing)."""
    out: list[float | None] = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i - window + 1) : i + 1] if v is not None and not math.isnan(v)]
        out.append(statistics.fmean(seen) if seen else None)
    return out


def plot_reports(arms: Mapping[str, Sequence[DemoReport]], path: Path, *, title: str = "") -> Path | None:
    """Draw the runs of each arm (``reward_source`` -> its runs, one per seed) into a PNG at ``path``.

    Left: each run's train reward per step (faint) and the smoothed mean over runs (bold). Right: the
    eval reward before and after GRPO, each run a line, the mean in bold. Returns ``path``, or None
    when matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None

    figure = Figure(figsize=(10, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    train, evals = figure.subplots(1, 2, width_ratios=[3, 1])
    labelled: dict[int, list[float]] = {0: [], 1: []}  # eval values written so far at each x (arms share "before")
    for arm, runs in arms.items():
        color = _COLORS.get(arm, "#d62728")
        label = ARM_LABELS.get(arm, arm)
        length = max((len(r.steps) for r in runs), default=0)
        window = max(3, length // 8)
        for run in runs:
            steps = [s.step for s in run.steps]
            train.plot(steps, [_nan(s.reward) for s in run.steps], color=color, alpha=0.25, linewidth=0.8)
        per_step = [
            statistics.fmean(vals)
            if (vals := [r.steps[i].reward for r in runs if i < len(r.steps) and r.steps[i].reward is not None])
            else None
            for i in range(length)
        ]
        curve = smooth(per_step, window)
        runs_said = f"{len(runs)} seeds" if len(runs) > 1 else f"seed {runs[0].seed}" if runs else ""
        train.plot(
            range(1, length + 1),
            [_nan(v) for v in curve],
            color=color,
            linewidth=2.2,
            label=f"{label} ({runs_said}; mean of {window} steps)",
        )
        before = [r.eval_reward("before GRPO") for r in runs]
        after = [r.eval_reward("after GRPO") for r in runs]
        for b, a in zip(before, after):
            evals.plot([0, 1], [_nan(b), _nan(a)], color=color, alpha=0.35, marker="o", markersize=3, linewidth=1)
        pairs = [(b, a) for b, a in zip(before, after) if b is not None and a is not None]
        if pairs:
            mean_before = statistics.fmean(b for b, _ in pairs)
            mean_after = statistics.fmean(a for _, a in pairs)
            evals.plot([0, 1], [mean_before, mean_after], color=color, marker="o", linewidth=2.4)
            for x, value, offset in ((0, mean_before, (-30, -3)), (1, mean_after, (6, -3))):
                if all(abs(value - other) > 0.04 for other in labelled[x]):
                    evals.annotate(f"{value:.2f}", (x, value), textcoords="offset points", xytext=offset)
                    labelled[x].append(value)
    train.set_xlabel("GRPO step")
    train.set_ylabel("train reward (episodes the server scored)")
    train.set_ylim(-0.02, 1.02)
    train.grid(alpha=0.3)
    train.legend(loc="center right", fontsize=8)
    evals.set_xticks([0, 1], ["before\nGRPO", "after\nGRPO"])
    evals.set_xlim(-0.45, 1.45)
    evals.set_ylim(-0.02, 1.02)
    evals.set_ylabel("eval reward (unseen tasks)")
    evals.grid(alpha=0.3)
    if title:
        figure.suptitle(title, fontsize=11)
    with staged(path) as temporary:  # the picture whole or not at all, as every file agentenv writes
        figure.savefig(temporary, format=path.suffix.lstrip(".") or "png")
    return path


def _nan(value: float | None) -> float:
    return math.nan if value is None else value
