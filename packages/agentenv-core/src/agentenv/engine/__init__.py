"""The engine: episodes played on deployed envs, their verifiers and reward, env kinds, agents run as processes.

An ``Episode`` plays one task: it deploys the task's toolset (a ``Deployment``, or one deployed ahead), runs tool
calls and turns, and scores the result with the task's verifiers and reward rule (``RewardArg``). A ``Service``
plays the protocol over a bundle (reset, step, the Task API's rows), one ``Player`` per session, for any transport.
Blocking work runs on ``ToolThreads``; subprocess envs are ``SubprocessEnv``; the built-in ``bash`` tool is ``BASH``;
agents run as processes through ``AgentProcess``. What the policy's programs may reach is ``agentenv.sandbox``'s.

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "Episode": "episode",
    "Step": "episode",
    "RewardArg": "scoring",
    "Verdict": "scoring",
    "Deployment": "deployment",
    "Player": "service",
    "Service": "service",
    "task_row": "service",
    "unknown_split": "service",
    "deploy_failure": "deployment",
    "DEFAULT_TOOL_THREADS": "threads",
    "TOOL_THREADS_VAR": "threads",
    "ToolThreads": "threads",
    "default_pool": "threads",
    "pool_size": "threads",
    "Check": "verifiers",
    "ToolRecord": "verifiers",
    "judge_prompt": "verifiers",
    "judge_score": "verifiers",
    "SubprocessEnv": "envkinds",
    "list_tools": "envkinds",
    "BASH": "bash",
    "BASH_KIND": "bash",
    "BashEnv": "bash",
    "agent_environment": "agents",
    "chat": "agents",
    "python_argv": "agents",
    "AgentDirs": "agentproc",
    "AgentExit": "agentproc",
    "AgentProcess": "agentproc",
    "openings_for": "agentproc",
}

__all__ = [
    "BASH",
    "BASH_KIND",
    "DEFAULT_TOOL_THREADS",
    "TOOL_THREADS_VAR",
    "AgentDirs",
    "AgentExit",
    "AgentProcess",
    "BashEnv",
    "Check",
    "Deployment",
    "Episode",
    "Player",
    "RewardArg",
    "Service",
    "Step",
    "SubprocessEnv",
    "ToolRecord",
    "ToolThreads",
    "Verdict",
    "agent_environment",
    "chat",
    "default_pool",
    "deploy_failure",
    "judge_prompt",
    "judge_score",
    "list_tools",
    "openings_for",
    "pool_size",
    "python_argv",
    "task_row",
    "unknown_split",
]

if TYPE_CHECKING:
    from agentenv.engine.agentproc import AgentDirs, AgentExit, AgentProcess, openings_for
    from agentenv.engine.agents import agent_environment, chat, python_argv
    from agentenv.engine.bash import BASH, BASH_KIND, BashEnv
    from agentenv.engine.deployment import Deployment, deploy_failure
    from agentenv.engine.envkinds import SubprocessEnv, list_tools
    from agentenv.engine.episode import Episode, Step
    from agentenv.engine.scoring import RewardArg, Verdict
    from agentenv.engine.service import Player, Service, task_row, unknown_split
    from agentenv.engine.threads import DEFAULT_TOOL_THREADS, TOOL_THREADS_VAR, ToolThreads, default_pool, pool_size
    from agentenv.engine.verifiers import Check, ToolRecord, judge_prompt, judge_score


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
