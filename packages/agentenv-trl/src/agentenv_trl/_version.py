"""The TRL integration's record: the TRL range it supports, declared once, and the check run before TRL loads.

The range is the ``trl`` extra of agentenv-trl's pyproject.toml (``trl = ["trl>=1.16.0,<1.17"]``), read
from the installed metadata by ``agentenv.plugins.Integration``; nothing here restates it.
"""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration

__all__ = ["INSTALL", "INTEGRATION", "SUPPORTED", "check_trl"]

INTEGRATION: Final[Integration] = Integration(
    name="trl",
    package="agentenv-trl",
    trainer="trl",
    offers={"environment": "agentenv_trl:AgentEnv", "demo": "agentenv_trl.demo:run_demo"},
)
SUPPORTED: str  # "trl>=1.16.0,<1.17", read on first use (every `agentenv` command imports the plugin)
INSTALL: str  # "pip install 'agentenv-trl[trl]'"

__getattr__ = INTEGRATION.module_attributes(__name__)


def check_trl(version: str | None = None) -> str:
    """Return the installed TRL version (or ``version``); raise ``ImportError`` naming the fix when it does not fit.

    Reads the installed distribution's metadata only: TRL itself is not imported.
    """
    return INTEGRATION.check(version, why="agentenv_trl trains with TRL")
