"""agentenv: train LLM agents with reinforcement learning on bundles of agentic tasks.

A bundle (tasks with splits, multi-turn prompts, toolsets, verifiers, reward rules) is written once,
served as an OpenEnv environment server, and trained on through a thin integration per trainer.

``import agentenv`` stays light: the names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

__version__ = "0.2.0"

_EXPORTS = {
    "load_bundle": "bundle",
    "find_bundle": "installed",
    "Bundle": "bundle",
    "EnvSpec": "bundle",
    "Task": "bundle",
    "Toolset": "bundle",
    "Turn": "bundle",
    "Env": "env",
    "Tool": "env",
    "tool": "env",
    "Episode": "episode",
    "EpisodeResult": "wire",
    "Failure": "wire",
    "Step": "episode",
    "Session": "session",
    "Shared": "settings",
    "Rollout": "rollout",
    "Check": "verifiers",
    "hookimpl": "hookspecs",
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
    from .bundle import Bundle, EnvSpec, Task, Toolset, Turn, load_bundle
    from .env import Env, Tool, tool
    from .episode import Episode, Step
    from .errors import AgentEnvError, BundleError, EnvCrashed, EpisodeFailed, EpisodeLost, RolloutFailed, ToolError
    from .hookspecs import hookimpl
    from .installed import find_bundle
    from .plugins import plugins
    from .rollout import Rollout
    from .session import Session
    from .settings import Shared
    from .verifiers import Check
    from .wire import EpisodeResult, Failure


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
