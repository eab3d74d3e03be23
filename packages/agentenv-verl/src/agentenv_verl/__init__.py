"""agentenv-verl: train on agentenv bundles with verl.

``python -m agentenv_verl URL OUT`` writes a served bundle's tasks as verl datasets and the loop config;
``agentenv_verl.loop.AgentEnvAgentLoop`` plays each row as an episode inside verl. For single-turn
training, ``agentenv_verl.reward.compute_score`` (``pkg://agentenv_verl.reward``) scores a response with
the task's verifiers, and ``agentenv_verl.single_turn.AgentEnvSingleTurnLoop`` scores its own samples
(masking those without a verdict under verl's legacy trainer); ``agentenv verl dapo`` writes a DAPO run,
``agentenv nemo-gym write`` NeMo Gym's JSONL rows.

Importing this package is light (the plugin loads on every ``agentenv`` command): the writers and the
reward function are imported on first use, and the loops (which check and import verl) too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

from .errors import LoopConfigError, NoVerdictError, RewardConfigError, RolloutFailed

if TYPE_CHECKING:
    from ._version import SUPPORTED
    from .dapo import write_dapo
    from .loop import AgentEnvAgentLoop
    from .nemo_gym import write_nemo_gym
    from .reward import compute_score, make_compute_score, make_reward_fn
    from .rows import verl_rows
    from .single_turn import AgentEnvSingleTurnLoop
    from .writer import PromptsTooLong, Written, write

__version__: str  # read from the installed metadata on first use: written once, in pyproject.toml

__all__ = [
    "SUPPORTED",
    "AgentEnvAgentLoop",
    "AgentEnvSingleTurnLoop",
    "LoopConfigError",
    "NoVerdictError",
    "PromptsTooLong",
    "RewardConfigError",
    "RolloutFailed",
    "Written",
    "compute_score",
    "make_compute_score",
    "make_reward_fn",
    "verl_rows",
    "write",
    "write_dapo",
    "write_nemo_gym",
]

_EXPORTS = {
    "SUPPORTED": "_version",
    "AgentEnvAgentLoop": "loop",
    "AgentEnvSingleTurnLoop": "single_turn",
    "PromptsTooLong": "writer",
    "Written": "writer",
    "compute_score": "reward",
    "make_compute_score": "reward",
    "make_reward_fn": "reward",
    "verl_rows": "rows",
    "write": "writer",
    "write_dapo": "dapo",
    "write_nemo_gym": "nemo_gym",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), distribution="agentenv-verl")
