"""agentenv: train LLM agents with reinforcement learning on bundles of agentic tasks.

A bundle (tasks with splits, multi-turn prompts, toolsets, verifiers, reward rules) is written once,
served as an OpenEnv environment server, and trained on through a thin integration per trainer.

``import agentenv`` stays light: the names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "load_bundle": "bundle",
    "Bundle": "bundle",
    "Task": "bundle",
    "Toolset": "bundle",
    "Turn": "bundle",
    "Env": "env",
    "Tool": "env",
    "tool": "env",
    "Episode": "episode",
    "EpisodeResult": "episode",
    "Failure": "episode",
    "Step": "episode",
    "Check": "verifiers",
    "hookimpl": "plugins",
    "plugins": "plugins",
    "AgentEnvError": "errors",
    "BundleError": "errors",
    "EnvCrashed": "errors",
    "ToolError": "errors",
    "EpisodeFailed": "errors",
}

__all__ = [
    "AgentEnvError",
    "Bundle",
    "BundleError",
    "Check",
    "Env",
    "EnvCrashed",
    "Episode",
    "EpisodeFailed",
    "EpisodeResult",
    "Failure",
    "Step",
    "Task",
    "Tool",
    "ToolError",
    "Toolset",
    "Turn",
    "hookimpl",
    "load_bundle",
    "plugins",
    "tool",
]

if TYPE_CHECKING:
    from .bundle import Bundle, Task, Toolset, Turn, load_bundle
    from .env import Env, Tool, tool
    from .episode import Episode, EpisodeResult, Failure, Step
    from .errors import AgentEnvError, BundleError, EnvCrashed, EpisodeFailed, ToolError
    from .plugins import hookimpl, plugins
    from .verifiers import Check


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
