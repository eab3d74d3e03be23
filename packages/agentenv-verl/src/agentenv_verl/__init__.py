"""agentenv-verl: train on agentenv bundles with verl.

``python -m agentenv_verl URL OUT`` writes a served bundle's tasks as verl datasets and the loop
config; ``agentenv_verl.loop.AgentEnvAgentLoop`` plays each row as an episode inside verl.

Importing this package is light (the plugin loads on every ``agentenv`` command): the writer is
imported on first use, and ``AgentEnvAgentLoop`` (which checks and imports verl) too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

from ._version import SUPPORTED
from .errors import LoopConfigError, RolloutFailed

if TYPE_CHECKING:
    from .loop import AgentEnvAgentLoop
    from .writer import PromptsTooLong, Written, write

__all__ = [
    "SUPPORTED",
    "AgentEnvAgentLoop",
    "LoopConfigError",
    "PromptsTooLong",
    "RolloutFailed",
    "Written",
    "write",
]

_EXPORTS = {"AgentEnvAgentLoop": "loop", "PromptsTooLong": "writer", "Written": "writer", "write": "writer"}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
