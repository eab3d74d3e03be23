"""What ``agentenv demo`` measured: per-step and eval rows, the printed table, and the files it writes.

Every reward here is an episode the server played (``AgentEnv.results``); TRL's logged reward sits
next to it. ``write_outputs`` writes ``steps.csv`` (one row per GRPO step), ``report.json`` (all of
it) and ``reward.png`` (``demo_plot``) into the run's output folder.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenv.evaluate import Summary, summarize_results
from agentenv.wire import EpisodeResult

__all__ = ["STEP_COLUMNS", "DemoReport", "EvalRow", "StepRow", "eval_summary", "fmt", "summary_file", "tally"]


@dataclass(frozen=True)
class StepRow:
    """One GRPO step: the episodes the server played for it and what TRL logged.

    ``reward`` and ``reward_std`` are over the scored episodes; ``tool_calls`` is TRL's mean calls
    per rollout (``end_turn`` included); ``seconds`` is the step's wall time.
    """

    step: int
    episodes: int
    scored: int
    failed: int
    reward: float | None
    reward_std: float | None
    trl_reward: float | None
    tool_calls: float | None
    seconds: float


@dataclass(frozen=True)
class EvalRow:
    """The eval split's reward, measured over the episodes of one ``trainer.evaluate()``.

    ``episodes``, ``scored``, ``failed``, ``reward`` and ``pass_at_1`` are the ``Summary`` that
    ``agentenv eval`` computes (``eval_summary``), so they compare with ``agentenv eval --compare``.
    """

    when: str
    episodes: int
    scored: int
    failed: int
    reward: float | None
    reward_std: float | None
    trl_reward: float | None
    tool_calls: float | None
    seconds: float
    pass_at_1: float | None = None


STEP_COLUMNS = tuple(f.name for f in dataclasses.fields(StepRow))
"""The columns of ``steps.csv``, in order."""


@dataclass
class DemoReport:
    """What the demo measured: per-step rewards, the eval reward before and after, and where time went.

    ``reward_source`` is what GRPO trained on: ``env`` (the served bundle's reward) or a control
    (``shuffled`` within each group, or ``constant``).
    """

    bundle: str
    model: str
    seed: int
    reward_source: str
    warm_start_steps: int
    warm_start_loss: float | None
    steps: list[StepRow] = field(default_factory=list)
    evals: list[EvalRow] = field(default_factory=list)
    episodes_played: int = 0  # in this process and on a server for spawned workers
    seconds: dict[str, float] = field(default_factory=dict)
    output_dir: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DemoReport:
        """Read the form ``as_dict`` writes (``report.json``)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["steps"] = [StepRow(**row) for row in data.get("steps", [])]
        values["evals"] = [EvalRow(**row) for row in data.get("evals", [])]
        return cls(**values)

    def eval_reward(self, when: str) -> float | None:
        """The eval reward measured ``when`` ("before GRPO" or "after GRPO"), None if not measured."""
        return next((e.reward for e in self.evals if e.when == when), None)

    def table(self) -> str:
        """The reward table the demo prints."""
        from agentenv.text import table

        steps = [
            (s.step, s.episodes, s.scored, s.failed, fmt(s.reward), fmt(s.trl_reward), fmt(s.tool_calls))
            for s in self.steps
        ]
        out = table(steps, ("step", "episodes", "scored", "failed", "reward", "TRL reward", "tool calls"))
        evals = [
            (
                e.when,
                e.episodes,
                e.scored,
                e.failed,
                fmt(e.reward),
                fmt(e.pass_at_1),
                fmt(e.trl_reward),
                fmt(e.tool_calls),
            )
            for e in self.evals
        ]
        header = ("eval split", "episodes", "scored", "failed", "reward", "pass@1", "TRL reward", "tool calls")
        out += "\n\n" + table(evals, header)
        return out


def fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def tally(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Episodes, scored, failed, and the mean and spread of the scored episodes' rewards."""
    rewards = [r.reward for r in results if r.outcome == "scored" and r.reward is not None]
    return {
        "episodes": len(results),
        "scored": sum(1 for r in results if r.outcome == "scored"),
        "failed": sum(1 for r in results if r.outcome == "failed"),
        "reward": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
    }


def eval_summary(results: Sequence[EpisodeResult], *, split: str, samples: int, run: dict[str, Any]) -> Summary:
    """The eval's episodes as ``agentenv eval``'s ``Summary`` (pass@1 and pass@``samples``, reward 1.0 passes)."""
    return summarize_results(results, split=split, ks=sorted({1, samples}), run=run)


def summary_file(when: str) -> str:
    """The name of the summary written for the eval ``when``: ``eval-before-grpo.json`` for "before GRPO"."""
    return "eval-" + "-".join(when.lower().split()) + ".json"
