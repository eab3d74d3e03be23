"""The errors agentenv-verl raises. Importing them does not import verl."""

from __future__ import annotations

from agentenv.errors import AgentEnvError
from agentenv.errors import RolloutFailed as _CoreRolloutFailed

__all__ = ["LoopConfigError", "RolloutFailed"]


class RolloutFailed(_CoreRolloutFailed):
    """The env failed a rollout on every attempt (``agentenv.errors.RolloutFailed``); never trained on as a zero.

    verl's V1 trainer tags the rollout's group as failed and the rollout never reaches a batch. Its
    siblings: the sync sampler trains those that succeeded as a smaller group (with
    ``sync_refill_failed_groups`` a fresh prompt replaces a group none of whose rollouts succeeded);
    the async samplers drop the whole group and fetch a fresh prompt."""


class LoopConfigError(AgentEnvError, ValueError):
    """The loop, its config or its dataset is wrong; replaying would not help. The message names the fix."""
