"""From a task's verdicts to its episode's reward: the reward rule applied, or why there is no reward.

An episode is ``unscored`` when a verifier gave no verdict (or the task has none) and ``failed`` (the verifier's
fault, never trained on) when the rule raises or gives a reward outside [0, 1]; else ``scored``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentenv.bundle import RewardSpec, Task
from agentenv.plugins import Plugins
from agentenv.wire import Failure, Outcome

__all__ = ["RewardArg", "Verdict", "verdict", "verifier_name"]

# a server's own reward rule, over the task's: a rule's name, a spec with params, or a callable of the scores
RewardArg = str | RewardSpec | Callable[[Mapping[str, float]], float] | None


@dataclass(frozen=True)
class Verdict:
    """How an episode ends once every turn is scored: its outcome, and its reward, failure or reason."""

    outcome: Outcome
    reward: float | None = None
    failure: Failure | None = None
    reason: str = ""


def verdict(task: Task, scores: Mapping[str, float | None], reward: RewardArg, plugins: Plugins) -> Verdict:
    """The verdict of ``task`` from its verifiers' ``scores``, by ``reward`` (None: the task's own rule)."""
    if not scores:
        return Verdict("unscored", reason=f"task {task.id!r} has no verifiers")
    missing = [k for k, v in scores.items() if v is None]
    if missing:
        return Verdict("unscored", reason=f"no verdict from {', '.join(missing)}")
    given = {k: float(v) for k, v in scores.items() if v is not None}
    rule = reward if reward is not None else task.reward
    try:
        value = _combine(rule, given, plugins)
    except Exception as exc:  # a plugin's rule or a callable given to the server: its fault, named
        return Verdict("failed", failure=Failure("verifier", "scoring", f"reward rule failed: {exc}"))
    if not 0.0 <= value <= 1.0:
        message = f"reward rule {task.reward.rule!r} gave {value!r}, outside [0, 1], from scores {given}"
        return Verdict("failed", failure=Failure("verifier", "scoring", message))
    return Verdict("scored", reward=value)


def _combine(rule: Any, scores: Mapping[str, float], plugins: Plugins) -> float:
    if callable(rule):
        return float(rule(scores))
    spec = RewardSpec(rule=rule) if isinstance(rule, str) else rule
    return float(plugins.reward_rule(spec.rule).combine(scores, spec.params))


def verifier_name(spec: Any) -> str:
    """How a verifier is named in a failure: its step id, its kind, and a python check's function."""
    check = spec.params.get("check") if spec.kind == "python" else None
    return f"verifier {spec.id!r} ({spec.kind}{f' check {check}' if check else ''})"
