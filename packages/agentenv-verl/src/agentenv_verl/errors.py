"""The errors agentenv-verl raises. Importing them does not import verl."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.errors import AgentEnvError
from agentenv.errors import RolloutFailed as _CoreRolloutFailed

if TYPE_CHECKING:
    from agentenv.wire import Failure

__all__ = ["LoopConfigError", "NoVerdictError", "RewardConfigError", "RolloutFailed"]


class RolloutFailed(_CoreRolloutFailed):
    """The env failed a rollout on every attempt (``agentenv.errors.RolloutFailed``); never trained on as a zero.

    verl's V1 trainer tags the rollout's group as failed and the rollout never reaches a batch. Its
    siblings: the sync sampler trains those that succeeded as a smaller group (with
    ``sync_refill_failed_groups`` a fresh prompt replaces a group none of whose rollouts succeeded);
    the async samplers drop the whole group and fetch a fresh prompt."""


class LoopConfigError(AgentEnvError, ValueError):
    """The loop, its config or its dataset is wrong; replaying would not help. The message names the fix."""


class RewardConfigError(AgentEnvError, ValueError):
    """The reward function's settings or a row are wrong (no server for a data source, a multi-turn task, a row
    without a task id); scoring again would not help. The message names the fix."""


class NoVerdictError(AgentEnvError):
    """A sample the env could not judge: it is kept out of training, never scored as 0.

    Raised by ``agentenv_verl.reward.compute_score`` when the episode failed on every attempt (an env or a
    server fault of ``agentenv.faults``: deploy, crash, deadline, a verifier that could not run, the server
    gone) or ended without a verdict (``outcome`` ``unscored``: its verifiers gave none). ``failures`` lists
    each attempt's failure; ``kind`` is the last one's kind, or ``unscored``.
    """

    def __init__(
        self, message: str, *, data_source: str, task_id: str, outcome: str, failures: list[Failure] | None = None
    ) -> None:
        self.data_source = data_source
        self.task_id = task_id
        self.outcome = outcome
        self.failures = list(failures or [])
        super().__init__(message)

    @property
    def kind(self) -> str:
        """Why there is no verdict: the last failure's kind (a row of the fault table), or ``unscored``."""
        return self.failures[-1].kind if self.failures else "unscored"
