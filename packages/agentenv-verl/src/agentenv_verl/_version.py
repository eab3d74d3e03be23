"""The verl integration's record: the verl range it supports, declared once, and the check run before verl loads.

The range is the ``verl`` extra of agentenv-verl's pyproject.toml (``verl = ["verl>=0.9.1,<0.10", ...]``),
read from the installed metadata by ``agentenv.plugins.Integration``; nothing here restates it.
"""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration

__all__ = ["AGENT_LOOP", "AGENT_LOOP_NAME", "INSTALL", "INTEGRATION", "SUPPORTED", "check_verl"]

AGENT_LOOP: Final[str] = "agentenv_verl.loop:AgentEnvAgentLoop"
AGENT_LOOP_NAME: Final[str] = "agentenv"

INTEGRATION: Final[Integration] = Integration(
    name="verl",
    package="agentenv-verl",
    trainer="verl",
    offers={"agent_loop": AGENT_LOOP, "agent_loop_name": AGENT_LOOP_NAME, "writer": "agentenv_verl.writer:write"},
)
SUPPORTED: Final[str] = INTEGRATION.requirement  # "verl>=0.9.1,<0.10"
INSTALL: Final[str] = INTEGRATION.install  # "pip install 'agentenv-verl[verl]'"


def check_verl(version: str | None = None) -> str:
    """Return the installed verl version (or ``version``); raise ``ImportError`` naming the fix when it does not fit."""
    return INTEGRATION.check(version, why="agentenv_verl.loop runs inside verl")
