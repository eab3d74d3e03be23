"""What a run's samples add up to: per task, per split and overall; and two summaries compared.

Samples the env lost (``failed``) and samples without a verdict (``unscored``) are kept out of every
rate and listed instead. Each task weighs the same: ``mean_reward`` is the mean over tasks of a task's
mean reward over its scored samples, and ``pass@k`` is the mean over tasks of the unbiased estimator
``1 - C(n-c, k) / C(n, k)`` (n scored samples of the task, c of them passed: ``reward >= threshold``),
over the tasks with at least k scored samples (``pass_tasks`` says how many). Per-step score means
are over the scored samples that have a verdict for the step.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from agentenv.errors import AgentEnvError
from agentenv.evaluate.results import Sample, samples_of, write_json
from agentenv.wire import EpisodeResult

__all__ = [
    "FORMAT",
    "Stats",
    "Summary",
    "TaskStats",
    "fmt",
    "pass_at_k",
    "summarize",
    "summarize_results",
    "text_table",
]

FORMAT: Final = 1  # summary.json's format version


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k of one task with ``n`` samples, ``c`` of them passed (None when ``n < k``)."""
    if k < 1 or n < k:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


@dataclass(frozen=True)
class TaskStats:
    """One task's samples: how many ended each way, how many passed, its mean reward and pass@k."""

    task: str
    split: str
    samples: int
    scored: int
    failed: int
    unscored: int
    passed: int
    mean_reward: float | None
    pass_at: dict[str, float | None]


@dataclass(frozen=True)
class Stats:
    """A split's (or the run's) numbers. Rates leave failed and unscored samples out (see the module doc)."""

    tasks: int
    samples: int
    scored: int
    failed: int
    unscored: int
    mean_reward: float | None
    pass_at: dict[str, float | None]
    pass_tasks: dict[str, int]
    scores: dict[str, float | None]
    tool_calls: int = 0
    malformed_calls: int = 0
    context_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    env_seconds: float = 0.0


def _task_stats(task: str, samples: Sequence[Sample], ks: Sequence[int], threshold: float) -> TaskStats:
    scored = [s for s in samples if s.outcome == "scored" and s.reward is not None]
    n, c = len(scored), sum(1 for s in scored if s.reward is not None and s.reward >= threshold)
    return TaskStats(
        task=task,
        split=samples[0].split,
        samples=len(samples),
        scored=n,
        failed=sum(1 for s in samples if s.outcome == "failed"),
        unscored=sum(1 for s in samples if s.outcome == "unscored"),
        passed=c,
        mean_reward=_mean(s.reward for s in scored),
        pass_at={str(k): pass_at_k(n, c, k) for k in ks},
    )


def _stats(tasks: Sequence[TaskStats], samples: Sequence[Sample], ks: Sequence[int]) -> Stats:
    steps: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s.outcome == "scored":
            for step, score in s.scores.items():
                steps.setdefault(step, [])
                if score is not None:
                    steps[step].append(float(score))
    counted = {str(k): [t.pass_at[str(k)] for t in tasks if t.pass_at.get(str(k)) is not None] for k in ks}
    return Stats(
        tasks=len(tasks),
        samples=len(samples),
        scored=sum(t.scored for t in tasks),
        failed=sum(t.failed for t in tasks),
        unscored=sum(t.unscored for t in tasks),
        mean_reward=_mean(t.mean_reward for t in tasks),
        pass_at={k: _mean(values) for k, values in counted.items()},
        pass_tasks={k: len(values) for k, values in counted.items()},
        scores={step: _mean(values) for step, values in steps.items()},
        tool_calls=sum(s.tool_calls for s in samples),
        malformed_calls=sum(s.malformed_calls for s in samples),
        context_limited=sum(1 for s in samples if s.context_limited),
        prompt_tokens=sum(s.prompt_tokens for s in samples),
        completion_tokens=sum(s.completion_tokens for s in samples),
        model_seconds=round(sum(s.model_seconds for s in samples), 3),
        env_seconds=round(sum(s.env_seconds for s in samples), 3),
    )


@dataclass(frozen=True)
class Summary:
    """A run's numbers (``summary.json``): per task, per split and overall, the env failures kept out of the
    rates, the unscored samples, and (``run``) the settings and wall time of the run that wrote it."""

    ks: list[int]
    threshold: float
    overall: Stats
    splits: dict[str, Stats]
    tasks: dict[str, TaskStats]
    failures: list[dict[str, Any]] = field(default_factory=list)
    unscored: list[dict[str, Any]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``summary.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        """Read the form ``as_dict`` writes."""
        return cls(
            ks=[int(k) for k in data["ks"]],
            threshold=float(data["threshold"]),
            overall=Stats(**data["overall"]),
            splits={name: Stats(**stats) for name, stats in data["splits"].items()},
            tasks={name: TaskStats(**stats) for name, stats in data["tasks"].items()},
            failures=list(data.get("failures") or []),
            unscored=list(data.get("unscored") or []),
            run=dict(data.get("run") or {}),
            format=int(data.get("format", FORMAT)),
        )

    @classmethod
    def read(cls, path: str | Path) -> Summary:
        """Read a ``summary.json`` (or the one in a folder); the error names the file and what is wrong."""
        path = Path(path)
        if path.is_dir():
            path = path / "summary.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AgentEnvError(
                f"{path}: cannot be read ({exc.strerror}); give the summary.json of an agentenv "
                "eval run (or its --out folder)"
            ) from None
        except json.JSONDecodeError as exc:
            raise AgentEnvError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AgentEnvError(
                f"{path}: not a summary written by agentenv eval ({type(exc).__name__}: {exc})"
            ) from None

    def write(self, path: str | Path) -> None:
        """Write ``summary.json`` (whole or not at all)."""
        write_json(Path(path), self.as_dict())

    def table(self, *, failures: int = 10) -> str:
        """The summary as text: one row per split and overall, the per-step score means, the env failures."""
        return summary_table(self, failures=failures)


def summarize(
    samples: Iterable[Sample],
    *,
    ks: Sequence[int] | None = None,
    threshold: float = 1.0,
    run: Mapping[str, Any] | None = None,
) -> Summary:
    """Add up ``samples`` (e.g. ``read_samples(DIR)``): per task, per split and overall.

    ``ks``: the k of each pass@k (default: 1 and the most samples any task has). ``threshold``: the
    reward a sample needs to pass. ``run``: the settings to keep with the numbers.
    """
    samples = list(samples)
    by_task: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_task[s.task].append(s)
    if ks is None:
        most = max((len(v) for v in by_task.values()), default=1)
        ks = sorted({1, most})
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise AgentEnvError(f"pass@k needs every k >= 1 (got {ks})")
    tasks = {task: _task_stats(task, group, ks, threshold) for task, group in by_task.items()}
    splits: dict[str, Stats] = {}
    for split in dict.fromkeys(t.split for t in tasks.values()):
        in_split = [t for t in tasks.values() if t.split == split]
        splits[split] = _stats(in_split, [s for s in samples if s.split == split], ks)
    ordered = sorted(samples, key=lambda s: (s.split, s.task, s.sample))
    failures = [
        {"task": s.task, "split": s.split, "sample": s.sample, "attempts": s.attempts, **(s.failure or {})}
        for s in ordered
        if s.outcome == "failed"
    ]
    unscored = [
        {"task": s.task, "split": s.split, "sample": s.sample, "reason": s.reason}
        for s in ordered
        if s.outcome == "unscored"
    ]
    return Summary(
        ks=list(ks),
        threshold=threshold,
        overall=_stats(list(tasks.values()), samples, ks),
        splits=splits,
        tasks=tasks,
        failures=failures,
        unscored=unscored,
        run=dict(run or {}),
    )


def summarize_results(
    results: Iterable[EpisodeResult],
    *,
    split: str = "eval",
    ks: Sequence[int] | None = None,
    threshold: float = 1.0,
    run: Mapping[str, Any] | None = None,
) -> Summary:
    """``summarize`` for episode results (a trainer's eval: TRL's, the demo's): the n-th result of a task is
    its sample n. Tokens, transcripts and attempts are not in a result, so they stay zero."""
    return summarize(samples_of(results, split=split, threshold=threshold), ks=ks, threshold=threshold, run=run)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table: a count as it is, a rate with ``digits`` decimals; ``-`` for none."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def text_table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    from agentenv.text import table

    return table(rows, header)


def _stats_row(name: str, s: Stats, ks: list[int]) -> tuple[Any, ...]:
    passes = [fmt(s.pass_at.get(str(k))) for k in ks]
    return (
        name,
        s.tasks,
        s.samples,
        s.scored,
        s.failed,
        s.unscored,
        fmt(s.mean_reward),
        *passes,
        s.prompt_tokens + s.completion_tokens,
        f"{s.model_seconds:.1f}",
        f"{s.env_seconds:.1f}",
    )


def summary_table(summary: Summary, *, failures: int = 10) -> str:
    """The text ``agentenv eval`` prints: splits and overall, per-step score means, the env failures kept out."""
    ks = summary.ks
    header = (
        "split",
        "tasks",
        "samples",
        "scored",
        "failed",
        "unscored",
        "mean reward",
        *(f"pass@{k}" for k in ks),
        "tokens",
        "model s",
        "env s",
    )
    rows = [_stats_row(name, stats, ks) for name, stats in summary.splits.items()]
    rows.append(_stats_row("all", summary.overall, ks))
    out = [text_table(rows, header)]
    short = [
        f"pass@{k} over {n} of {summary.overall.tasks} tasks (the others have fewer than {k} scored samples)"
        for k, n in summary.overall.pass_tasks.items()
        if n < summary.overall.tasks and int(k) > 1
    ]
    out += short
    steps = list(dict.fromkeys(step for s in summary.splits.values() for step in s.scores))
    if steps:
        names = list(summary.splits)
        step_rows = [(step, *(fmt(summary.splits[n].scores.get(step)) for n in names)) for step in steps]
        out.append("\n" + text_table(step_rows, ("step score (mean)", *names)))
    o = summary.overall
    if o.malformed_calls or o.context_limited:
        out.append(
            f"\nthe model's mistakes (scored): {o.malformed_calls} malformed tool call(s) of {o.tool_calls}; "
            f"{o.context_limited} sample(s) outgrew the model's context and ended there"
        )
    if summary.failures:
        out.append(
            f"\nenv failures kept out of the rates ({len(summary.failures)}; the env's or server's fault, not "
            "the model's; --resume plays them again):"
        )
        for f in summary.failures[:failures]:
            out.append(
                f"  {f['task']} #{f['sample']}: {f.get('kind')} at {f.get('stage')} after {f.get('attempts')} "
                f"attempt(s): {str(f.get('message', ''))[:160]}"
            )
        if len(summary.failures) > failures:
            out.append(f"  ... {len(summary.failures) - failures} more in summary.json")
    if summary.unscored:
        out.append(f"\nunscored (no verdict; kept out of the rates): {len(summary.unscored)}")
    return "\n".join(out)
