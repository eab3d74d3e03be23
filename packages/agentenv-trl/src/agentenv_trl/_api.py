"""The TRL internals agentenv-trl leans on, named once and probed when TRL asks for the environment factory.

``AgentEnv`` is TRL's ``environment_factory`` contract: TRL builds one environment per rollout, calls
``reset(**row)``, offers its public methods as tools and reads ``get_reward()``. What can be checked by
name is checked before any rollout runs: the trainers take ``environment_factory``, the config the tool
loop's cap. TRL itself is never imported here: the probe runs in a process that imported it.
"""

from __future__ import annotations

import sys
from typing import Final

from agentenv.plugins import Internal, internals

from ._version import INTEGRATION

__all__ = ["INTERNALS", "check_internals"]

INTERNALS: Final[tuple[Internal, ...]] = (
    Internal("trl:GRPOTrainer", parameters=("environment_factory", "train_dataset", "reward_funcs")),
    Internal("trl:GRPOConfig", attributes=("max_tool_calling_iterations",)),
)

_checked = False


def check_internals() -> None:
    """Probe TRL's internals once, when this process has imported TRL (``MissingInternal`` if one is gone)."""
    global _checked
    if _checked or "trl" not in sys.modules:
        return
    internals.probe(INTEGRATION, INTERNALS)
    _checked = True
