"""The verl integration's record: the verl range it supports, declared once, and the check run before verl loads.

The range is the ``verl`` extra of agentenv-verl's pyproject.toml (``verl = ["verl>=0.9.1,<0.10", ...]``),
read from the installed metadata by ``agentenv.plugins.Integration``; nothing here restates it.
"""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration

__all__ = [
    "AGENT_LOOP",
    "AGENT_LOOP_NAME",
    "INSTALL",
    "INTEGRATION",
    "SINGLE_TURN_LOOP",
    "SINGLE_TURN_LOOP_NAME",
    "SUPPORTED",
    "check_verl",
]

AGENT_LOOP: Final[str] = "agentenv_verl.loop:AgentEnvAgentLoop"
AGENT_LOOP_NAME: Final[str] = "agentenv"
SINGLE_TURN_LOOP: Final[str] = "agentenv_verl.single_turn:AgentEnvSingleTurnLoop"
SINGLE_TURN_LOOP_NAME: Final[str] = "agentenv_single"

INTEGRATION: Final[Integration] = Integration(
    name="verl",
    package="agentenv-verl",
    trainer="verl",
    offers={
        "agent_loop": AGENT_LOOP,
        "agent_loop_name": AGENT_LOOP_NAME,
        "single_turn_loop": SINGLE_TURN_LOOP,
        "single_turn_loop_name": SINGLE_TURN_LOOP_NAME,
        "reward_function": "agentenv_verl.reward:compute_score",
        "writer": "agentenv_verl.writer:write",
    },
)
SUPPORTED: str  # "verl>=0.9.1,<0.10", read on first use (every `agentenv` command imports the plugin)
INSTALL: str  # "pip install 'agentenv-verl[verl]'"

__getattr__ = INTEGRATION.module_attributes(__name__)


def check_verl(version: str | None = None) -> str:
    """Return the installed verl version (or ``version``); raise ``ImportError`` naming the fix when it does not fit."""
    return INTEGRATION.check(version, why="agentenv_verl.loop runs inside verl")


def missing_for_agent_loop(exc: ModuleNotFoundError) -> ImportError:
    """The error for a module verl's agent loop imports but verl declares only in an extra."""
    return ImportError(
        f"verl's agent loop needs {exc.name!r}, which is not installed: {INTEGRATION.install} (it brings what "
        f"{INTEGRATION.requirement} imports: cachetools, uvicorn, fastapi)"
    )
