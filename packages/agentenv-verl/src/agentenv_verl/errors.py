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
    """The env failed a rollout on every attempt. verl's V1 trainer records the rollout's group as
    failed and leaves it out of the loss and of the group's baseline; it is never trained on as a zero."""

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
