"""Control arms: the same GRPO run with the env's reward column replaced, to show what the real reward teaches.

``shuffled`` permutes the scored rewards within each group of rollouts of one prompt: the group's
mean and spread stay as they were, so updates are as large, but which rollout earned which reward is
lost. ``constant`` gives every scored rollout 1.0 (zero advantage: no update at all). The episodes
are still played and scored by the server (``AgentEnv.results`` keeps their true rewards); only
what TRL trains on changes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
from collections.abc import Callable, Iterator
from typing import Any, Final

__all__ = ["REWARD_SOURCES", "controlled_reward", "replaced_rewards"]

REWARD_SOURCES: Final = ("env", "shuffled", "constant")
"""What GRPO can train on: the env's reward, or one of the two controls."""

CONSTANT: Final = 1.0


def replaced_rewards(rewards: list[float | None], source: str, group: int, rng: random.Random) -> list[float | None]:
    """``rewards`` (one per rollout, groups of ``group`` in a row) as ``source`` says; None stays None."""
    if source == "env":
        return list(rewards)
    if source == "constant":
        return [None if r is None else CONSTANT for r in rewards]
    if source != "shuffled":
        raise ValueError(f"unknown reward source {source!r}; one of: {', '.join(REWARD_SOURCES)}")
    out = list(rewards)
    for start in range(0, len(out), group):
        scored = [i for i in range(start, min(start + group, len(out))) if out[i] is not None]
        values = [out[i] for i in scored]
        rng.shuffle(values)
        for i, value in zip(scored, values):
            out[i] = value
    return out


@contextlib.contextmanager
def controlled_reward(trainer: Any, columns: set[str], source: str, *, seed: int = 0) -> Iterator[None]:
    """While inside, ``trainer`` trains on ``source`` instead of its reward columns named in ``columns``.

    TRL names the column of an environment's ``get_reward`` after the environment class; each such
    column's function is wrapped (so ``get_reward`` still runs and the server still scores every
    episode) and put back on exit. TRL's groups are ``num_generations`` rollouts in a row.
    """
    if source == "env":
        yield
        return
    if source not in REWARD_SOURCES:
        raise ValueError(f"unknown reward source {source!r}; one of: {', '.join(REWARD_SOURCES)}")
    found = [i for i, name in enumerate(trainer.reward_func_names) if name in columns]
    if not found:
        raise ValueError(
            f"the trainer has no reward column named {', '.join(sorted(columns))} (its columns: "
            f"{', '.join(trainer.reward_func_names)}); pass the environment classes' names"
        )
    rng = random.Random(seed)
    group = trainer.num_generations
    originals = {i: trainer.reward_funcs[i] for i in found}

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):  # an async get_reward: TRL awaits the column's function

            async def areward(*args: Any, **kwargs: Any) -> list[float | None]:
                return replaced_rewards(list(await func(*args, **kwargs)), source, group, rng)

            return functools.wraps(func)(areward)

        def reward(*args: Any, **kwargs: Any) -> list[float | None]:
            return replaced_rewards(list(func(*args, **kwargs)), source, group, rng)

        return functools.wraps(func)(reward)

    for i, func in originals.items():
        trainer.reward_funcs[i] = wrap(func)
    try:
        yield
    finally:
        for i, func in originals.items():
            trainer.reward_funcs[i] = func
