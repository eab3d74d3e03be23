"""Helpers of the harness tests: the harness bundle and a stand-in engine (its fixtures: tests.support.fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.paths import HARNESS
from tests.support.standin.vllm import Served, StandinEngine, serve

__all__ = ["HARNESS", "PLACEHOLDER", "Engine", "every_token_trains", "prompt_of", "solve_twice_at_once"]

PLACEHOLDER = "http://127.0.0.1:9/v1"  # where the harness bundle's judges and user simulators point until patched


def _probe(request: dict[str, Any]) -> bool:
    first = str((request.get("messages") or [{}])[0].get("content"))
    return first.startswith(("Reply with", "Use the bash tool to list the files"))


class Engine:
    """A running stand-in engine: its state (requests, models) and its URL."""

    def __init__(self, models: list[str] | None = None, mode: str = "tokens") -> None:
        self.state: StandinEngine
        self.server: Served
        self.state, self.server = serve(models, mode)
        self.url = self.server.url

    def chats(self) -> list[dict[str, Any]]:
        """The chat requests it got, without the capture proxy's probes of the engine."""
        with self.state.lock:
            return [r for r in self.state.requests if r.get("messages") and not _probe(r)]

    def saw(self, text: str) -> bool:
        """Whether any chat request's messages held ``text``."""
        return any(text in str(r.get("messages")) for r in self.chats())


def prompt_of(bundle: Path | str, task_id: str, split: str) -> list[dict[str, str]]:
    """The prompt of ``task_id``'s row in ``prompt_rows(bundle, split)``."""
    from agentenv_harness import prompt_rows

    rows = prompt_rows(bundle, split)
    return next(row["prompt"] for row in rows if row["task_id"] == task_id)


def solve_twice_at_once(factory: Any, prompt: list[dict[str, str]]) -> tuple[list[Any], list[Any]]:
    """Two rollouts of ``prompt`` at once on ``factory``, played to their end and closed: both agents exit 0 and
    score 1.0. Returns the sessions and their training traces."""
    sessions = [factory.create(prompt, seed=0) for _ in range(2)]
    codes = [s.wait_for_completion() for s in sessions]
    traces = [s.fetch_training_trace() for s in sessions]
    verdicts = [s.verify([]) for s in sessions]
    for session in sessions:
        session.close()
    assert codes == [0, 0], [v.metrics for v in verdicts]
    assert [v.env_reward for v in verdicts] == [1.0, 1.0], [v.metrics for v in verdicts]
    return sessions, traces


def every_token_trains(trace: object) -> None:
    """TRL's own reading of a rollout's trace: a tool call and the answer, each completion token in a training row's
    completion mask, with its log-prob (TRL is imported here: only the tiers that install it call this)."""
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    turns = _turns_from_training_trace(trace)
    rows, _ = _chain_to_sequences(turns, "r", 0)
    assert len(turns) >= 2  # a tool call, then the answer
    assert sum(sum(r.completion_mask) for r in rows) == sum(len(t.output_ids) for t in turns)
    assert all(len(t.output_log_probs) == len(t.output_ids) > 0 for t in turns)
