"""agentenv: train LLM agents with reinforcement learning on bundles of agentic tasks.

A bundle (tasks with splits, multi-turn prompts, toolsets, verifiers, reward rules) is written once,
served as an OpenEnv environment server, and trained on through a thin integration per trainer.

``import agentenv`` stays light: the names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv import _moved
from agentenv.lazy import lazy_exports

__version__: str  # read from the installed metadata on first use: written once, in pyproject.toml

_EXPORTS = {
    "load_bundle": "bundle",
    "find_bundle": "bundle",
    "Bundle": "bundle",
    "EnvSpec": "bundle",
    "Task": "bundle",
    "Toolset": "bundle",
    "Turn": "bundle",
    "Env": "env",
    "Tool": "env",
    "tool": "env",
    "Episode": "engine.episode",
    "EpisodeResult": "wire",
    "Failure": "wire",
    "Step": "engine.episode",
    "Session": "client.session",
    "Shared": "client.settings",
    "Rollout": "client.rollout",
    "Check": "engine.verifiers",
    "hookimpl": "plugins.hookspecs",
    "plugins": "plugins",
    "AgentEnvError": "errors",
    "BundleError": "errors",
    "EnvCrashed": "errors",
    "ToolError": "errors",
    "EpisodeFailed": "errors",
    "EpisodeLost": "errors",
    "RolloutFailed": "errors",
}

__all__ = [
    "AgentEnvError",
    "Bundle",
    "BundleError",
    "Check",
    "Env",
    "EnvCrashed",
    "EnvSpec",
    "Episode",
    "EpisodeFailed",
    "EpisodeLost",
    "EpisodeResult",
    "Failure",
    "Rollout",
    "RolloutFailed",
    "Session",
    "Shared",
    "Step",
    "Task",
    "Tool",
    "ToolError",
    "Toolset",
    "Turn",
    "find_bundle",
    "hookimpl",
    "load_bundle",
    "plugins",
    "tool",
]

if TYPE_CHECKING:
    from agentenv.bundle import Bundle, EnvSpec, Task, Toolset, Turn, load_bundle
    from agentenv.bundle.installed import find_bundle
    from agentenv.client.rollout import Rollout
    from agentenv.client.session import Session
    from agentenv.client.settings import Shared
    from agentenv.engine.episode import Episode, Step
    from agentenv.engine.verifiers import Check
    from agentenv.env import Env, Tool, tool
    from agentenv.errors import (
        AgentEnvError,
        BundleError,
        EnvCrashed,
        EpisodeFailed,
        EpisodeLost,
        RolloutFailed,
        ToolError,
    )
    from agentenv.plugins import plugins
    from agentenv.plugins.hookspecs import hookimpl
    from agentenv.wire import EpisodeResult, Failure


_moved.install()
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), distribution="agentenv-core")
