"""agentenv-harness: train a bundle's own agents with TRL's harness rollouts through OpenEnv's capture proxy.

    from functools import partial
    from agentenv_harness import AgentEnvSessionFactory, prompt_rows
    from trl.experimental.async_grpo import AsyncGRPOTrainer
    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker

    worker = HarnessRolloutWorker(
        harness_session_factory=partial(AgentEnvSessionFactory, "my-bundle", llm_url=URL, model=MODEL,
                                        lora_name="trl-policy"),
        harness_adapter=None, reward_funcs=[], lora_name="trl-policy", dataset=prompt_rows("my-bundle"), ...)

A task deploys its own solver agent (a coding-agent CLI or any program); its model calls go through the
capture proxy, which records the token ids and log-probs TRL trains on; the task's verifiers give the
reward. The names below load on first use: importing the package imports neither TRL nor OpenEnv.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

__version__: str  # read from the installed metadata on first use: written once, in pyproject.toml

_EXPORTS = {
    "AgentEnvSession": "factory",
    "AgentEnvSessionFactory": "factory",
    "CaptureProxy": "capture",
    "LeftOut": "tasks",
    "Play": "play",
    "PlayReport": "play",
    "prompt_rows": "tasks",
}

__all__ = ["AgentEnvSession", "AgentEnvSessionFactory", "CaptureProxy", "LeftOut", "Play", "PlayReport", "prompt_rows"]

if TYPE_CHECKING:
    from .capture import CaptureProxy
    from .factory import AgentEnvSession, AgentEnvSessionFactory
    from .play import Play, PlayReport
    from .tasks import LeftOut, prompt_rows

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), distribution="agentenv-harness")
