"""What a demo run is asked to do: the bundle, the model, the steps, the reward arm, the seed (``agentenv demo``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenv.errors import AgentEnvError

from .controls import REWARD_SOURCES

__all__ = ["DemoConfig"]


@dataclass(frozen=True)
class DemoConfig:
    """What ``agentenv demo`` trains, and how long (``quick()`` is the CI configuration).

    ``reward``: what GRPO trains on, ``env`` (the served bundle's reward) or a control arm
    (``shuffled`` within each group, ``constant``). ``text_answers``: the share of warm-start
    conversations that answer in plain text instead of with ``end_turn``. ``threads``: torch's thread count (1 for the
    tiny model unless given; the same count gives the same numbers run after run).
    """

    bundle: Path | None = None
    model: str | None = None
    steps: int = 40
    warm_start_steps: int | None = None
    warm_start_learning_rate: float = 2e-3
    text_answers: float = 0.7
    prompts_per_step: int = 8
    num_generations: int = 4
    eval_generations: int = 4
    eval_batch_size: int = 32
    max_concurrent_envs: int = 64
    max_completion_length: int = 256
    max_tool_calling_iterations: int = 10
    learning_rate: float | None = None
    temperature: float = 1.0
    hidden_size: int = 128
    layers: int = 2
    threads: int | None = None
    seed: int = 0
    reward: str = "env"
    output_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.reward not in REWARD_SOURCES:
            raise AgentEnvError(f"reward={self.reward!r}: unknown; one of {', '.join(REWARD_SOURCES)} (--reward)")
        if not 0.0 <= self.text_answers < 1.0:
            raise AgentEnvError(f"text_answers={self.text_answers}: a share in [0, 1) (--text-answers)")

    @classmethod
    def quick(cls, **changes: Any) -> DemoConfig:
        """A short run for CI: a smaller model, a brief warm start, two GRPO steps of 2 prompts, eval sampled twice."""
        short = {"steps": 2, "warm_start_steps": 60, "hidden_size": 64, "layers": 2}
        return cls(**{**short, "prompts_per_step": 2, "eval_generations": 2, **changes})

    def warm_steps(self) -> int:
        """Warm-start steps: 1000 for the tiny model, none for a real one unless asked."""
        if self.warm_start_steps is not None:
            return self.warm_start_steps
        return 0 if self.model else 1000

    def grpo_learning_rate(self) -> float:
        """GRPO's learning rate: 5e-4 for the tiny model, 1e-6 for a real one (``--model``) unless asked."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 1e-6 if self.model else 5e-4
