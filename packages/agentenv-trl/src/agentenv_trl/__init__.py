"""agentenv-trl: train on an agentenv server with TRL's GRPOTrainer (and AsyncGRPO's environment path).

    from trl import GRPOConfig, GRPOTrainer
    from agentenv_trl import AgentEnv

    env = AgentEnv("http://localhost:8000")   # or AgentEnv.local("examples/bundles/inbox")
    trainer = GRPOTrainer(model=..., args=GRPOConfig(max_tool_calling_iterations=12),
                          train_dataset=env.dataset, environment_factory=env.factory)

``import agentenv_trl`` is light: ``AgentEnv`` loads on first use, and checks then that the installed
TRL is in the supported range (``SUPPORTED``). Neither TRL nor torch is imported by this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

__version__: str  # read from the installed metadata on first use: written once, in pyproject.toml

__all__ = ["SUPPORTED", "AgentEnv", "EpisodeLost", "TaskEnvironment", "__version__"]

_EXPORTS = {"SUPPORTED": "_version", "AgentEnv": "env", "EpisodeLost": "environment", "TaskEnvironment": "environment"}

if TYPE_CHECKING:
    from ._version import SUPPORTED
    from .env import AgentEnv
    from .environment import EpisodeLost, TaskEnvironment


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), distribution="agentenv-trl")
