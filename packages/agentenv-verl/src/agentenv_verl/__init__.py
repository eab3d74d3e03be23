"""agentenv-verl: train on agentenv bundles with verl.

``python -m agentenv_verl URL OUT`` writes a served bundle's tasks as verl datasets and the loop
config; ``agentenv_verl.loop.AgentEnvAgentLoop`` plays each row as an episode inside verl. Importing
this package does not import verl; ``AgentEnvAgentLoop`` is imported (and verl checked) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import SUPPORTED
from .errors import AttemptFailure, LoopConfigError, RolloutFailed
from .writer import PromptsTooLong, Written, write

if TYPE_CHECKING:
    from .loop import AgentEnvAgentLoop

__all__ = [
    "SUPPORTED",
    "AgentEnvAgentLoop",
    "AttemptFailure",
    "LoopConfigError",
    "PromptsTooLong",
    "RolloutFailed",
    "Written",
    "write",
]


def __getattr__(name: str) -> Any:
    if name == "AgentEnvAgentLoop":
        from .loop import AgentEnvAgentLoop

        return AgentEnvAgentLoop
    raise AttributeError(f"module 'agentenv_verl' has no attribute {name!r}")
