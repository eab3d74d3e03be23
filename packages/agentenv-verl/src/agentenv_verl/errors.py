"""The errors agentenv-verl raises. Importing them does not import verl."""

from __future__ import annotations

from dataclasses import dataclass

from agentenv.errors import AgentEnvError

__all__ = ["AttemptFailure", "LoopConfigError", "RolloutFailed"]


@dataclass(frozen=True)
class AttemptFailure:
    """Why one attempt at a rollout failed: the env's failure ``kind`` and ``stage``, and the message."""

    kind: str
    stage: str
    message: str


class RolloutFailed(AgentEnvError):
    """The env failed a rollout on every attempt; it is never trained on as a zero.

    verl's V1 trainer tags the rollout's group as failed and the rollout never reaches a batch. Its
    siblings: the sync sampler trains those that succeeded as a smaller group (with
    ``sync_refill_failed_groups`` a fresh prompt replaces a group none of whose rollouts succeeded);
    the async samplers drop the whole group and fetch a fresh prompt."""

    def __init__(self, message: str, *, task_id: str, failures: list[AttemptFailure]) -> None:
        self.task_id = task_id
        self.failures = list(failures)
        super().__init__(message)

    @property
    def attempts(self) -> int:
        """How many attempts were played."""
        return len(self.failures)


class LoopConfigError(AgentEnvError, ValueError):
    """The loop, its config or its dataset is wrong; replaying would not help. The message names the fix."""
