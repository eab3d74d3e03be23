"""The OpenEnv and TRL internals agentenv-harness leans on, named once and probed when its factory module loads.

``OPENENV_INTERNALS``: OpenEnv's capture proxy (``agentenv_harness.capture``) and harness session types
(``agentenv_harness.factory``). ``TRL_INTERNALS``: TRL's harness rollout worker, which builds the factory;
probed only in a process that has imported TRL (any other OpenEnv consumer may use the factory without it).
``agentenv.plugins.internals.probe`` refuses, naming the version installed, the supported range and the missing name.
"""

from __future__ import annotations

import sys
from typing import Final

from agentenv.plugins import Internal, internals

from ._version import OPENENV, TRL

__all__ = ["OPENENV_INTERNALS", "TRL_INTERNALS", "check_internals"]

_CAPTURE = "openenv.core.harness.capture"

OPENENV_INTERNALS: Final[tuple[Internal, ...]] = (
    Internal(
        f"{_CAPTURE}.server:create_app",
        parameters=("llm_url", "model", "admin_key", "capture_level", "max_model_calls", "max_output_tokens"),
    ),
    Internal(f"{_CAPTURE}:require_llm", parameters=("llm_url", "model", "timeout", "require_tokens")),
    Internal(f"{_CAPTURE}:to_training_trace", parameters=("graph", "document")),
    Internal(f"{_CAPTURE}.export:export_session", parameters=("session", "include_messages", "capture_level")),
    Internal(f"{_CAPTURE}.sessions:extract_api_key", parameters=("headers",)),
    Internal("openenv.core.harness:ResourceSession"),
    Internal("openenv.core.harness:ResourceSessionFactory"),
    Internal("openenv.core.harness:ToolResult"),
    Internal("openenv.core.harness:VerifyResult"),
    Internal("openenv.core.harness:TrainingTrace"),
)

TRL_INTERNALS: Final[tuple[Internal, ...]] = (
    Internal("trl.experimental.async_grpo.openenv_harness:HarnessRolloutWorker"),
    Internal("trl.experimental.async_grpo:AsyncGRPOTrainer"),
)


def check_internals() -> None:
    """Probe OpenEnv's internals, and TRL's when this process has imported TRL (``MissingInternal`` if one is gone)."""
    internals.probe(OPENENV, OPENENV_INTERNALS)
    if "trl" in sys.modules and TRL.installed_version() is not None:
        internals.probe(TRL, TRL_INTERNALS)
