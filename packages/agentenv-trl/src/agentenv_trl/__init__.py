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

import importlib
from typing import TYPE_CHECKING, Any

from ._version import SUPPORTED, __version__

__all__ = ["SUPPORTED", "AgentEnv", "EpisodeLost", "TaskEnvironment", "__version__"]

_EXPORTS = {"AgentEnv": "env", "EpisodeLost": "env", "TaskEnvironment": "env"}

if TYPE_CHECKING:
    from .env import AgentEnv, EpisodeLost, TaskEnvironment


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentenv_trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
