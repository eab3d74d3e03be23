"""Summaries as text, and two summaries compared (``agentenv eval --compare A B``; the demo's before and after)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agentenv.evaluate.summary import fmt, text_table

if TYPE_CHECKING:
    from agentenv.evaluate.summary import Stats, Summary

__all__ = ["Comparison", "Delta", "TaskDelta", "compare"]

_SETTINGS = ("bundle", "splits", "model", "samples", "temperature", "max_turns", "max_tokens", "threshold")


def _signed(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+d}" if isinstance(value, int) else f"{value:+.3f}"


# ---------------------------------------------------------------------------------------------
# Comparing two summaries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """One number in A and in B, and ``b - a`` (None when either is missing)."""

    name: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        """``b - a``."""
        return None if self.a is None or self.b is None else self.b - self.a


@dataclass(frozen=True)
class TaskDelta:
    """One task in both runs: its mean reward and pass@1 in each."""

    task: str
    split: str
    reward: Delta
    pass1: Delta


@dataclass(frozen=True)
class Comparison:
    """B against A: overall and per split (mean reward, each pass@k both have, scored and failed samples),
    per task, the tasks only one run has, and the settings in which the runs differ."""

    a: str
    b: str
    overall: list[Delta]
    splits: dict[str, list[Delta]]
    tasks: list[TaskDelta]
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (each delta with its ``delta``)."""

        def delta(d: Delta) -> dict[str, Any]:
            return {**asdict(d), "delta": d.delta}

        return {
            "a": self.a,
            "b": self.b,
            "overall": [delta(d) for d in self.overall],
            "splits": {name: [delta(d) for d in ds] for name, ds in self.splits.items()},
            "tasks": [
                {"task": t.task, "split": t.split, "reward": delta(t.reward), "pass@1": delta(t.pass1)}
                for t in self.tasks
            ],
            "only_a": self.only_a,
            "only_b": self.only_b,
            "differences": {k: list(v) for k, v in self.differences.items()},
        }

    def table(self, *, tasks: int = 50) -> str:
        """The comparison as text: overall and per split, then the tasks that changed most (up to ``tasks``)."""
        out = [f"A: {self.a}\nB: {self.b}"]
        for name, (va, vb) in self.differences.items():
            out.append(f"note: the runs differ in {name}: {va!r} (A) vs {vb!r} (B)")
        rows = [("all", d.name, fmt(d.a), fmt(d.b), _signed(d.delta)) for d in self.overall]
        for split, ds in self.splits.items():
            rows += [(split, d.name, fmt(d.a), fmt(d.b), _signed(d.delta)) for d in ds]
        out.append("\n" + text_table(rows, ("split", "metric", "A", "B", "B - A")))
        changed = [t for t in self.tasks if (t.reward.delta or 0.0) != 0.0 or (t.pass1.delta or 0.0) != 0.0]
        changed.sort(key=lambda t: (-abs(t.reward.delta or 0.0), t.task))
        if changed:
            task_rows = [
                (
                    t.task,
                    t.split,
                    fmt(t.reward.a),
                    fmt(t.reward.b),
                    _signed(t.reward.delta),
                    fmt(t.pass1.a),
                    fmt(t.pass1.b),
                )
                for t in changed[:tasks]
            ]
            out.append(f"\n{len(changed)} of {len(self.tasks)} tasks changed:")
            out.append(
                text_table(task_rows, ("task", "split", "reward A", "reward B", "B - A", "pass@1 A", "pass@1 B"))
            )
            if len(changed) > tasks:
                out.append(f"... {len(changed) - tasks} more (--json prints every task)")
        else:
            out.append(f"\nno task changed (of {len(self.tasks)} in both)")
        for label, only in (("A", self.only_a), ("B", self.only_b)):
            if only:
                shown = ", ".join(only[:10]) + (f", ... ({len(only)} in all)" if len(only) > 10 else "")
                out.append(f"only in {label}: {shown}")
        return "\n".join(out)


def _deltas(a: Stats, b: Stats, ks: list[int]) -> list[Delta]:
    out = [Delta("mean reward", a.mean_reward, b.mean_reward)]
    out += [Delta(f"pass@{k}", a.pass_at.get(str(k)), b.pass_at.get(str(k))) for k in ks]
    out += [Delta("scored", a.scored, b.scored), Delta("failed", a.failed, b.failed)]
    return out


def compare(a: Summary, b: Summary, *, a_name: str = "A", b_name: str = "B") -> Comparison:
    """B against A (e.g. after training against before): every number both summaries have, and its change."""
    ks = [k for k in a.ks if k in b.ks]
    splits = {name: _deltas(a.splits[name], b.splits[name], ks) for name in a.splits if name in b.splits}
    tasks = [
        TaskDelta(
            task=name,
            split=ta.split,
            reward=Delta("mean reward", ta.mean_reward, tb.mean_reward),
            pass1=Delta("pass@1", ta.pass_at.get("1"), tb.pass_at.get("1")),
        )
        for name, ta in a.tasks.items()
        if (tb := b.tasks.get(name)) is not None
    ]
    differences = {key: (a.run.get(key), b.run.get(key)) for key in _SETTINGS if a.run.get(key) != b.run.get(key)}
    if a.threshold != b.threshold:
        differences["threshold"] = (a.threshold, b.threshold)
    return Comparison(
        a=a_name,
        b=b_name,
        overall=_deltas(a.overall, b.overall, ks),
        splits=splits,
        tasks=tasks,
        only_a=[t for t in a.tasks if t not in b.tasks],
        only_b=[t for t in b.tasks if t not in a.tasks],
        differences=differences,
    )
