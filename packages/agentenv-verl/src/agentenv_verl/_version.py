"""The verl versions agentenv-verl supports, declared once, and the check run when the loop loads."""

from __future__ import annotations

from typing import Final

from agentenv.plugins import check_trainer

__all__ = ["DISTRIBUTION", "INSTALL", "SUPPORTED", "check_verl", "supported_range"]

SUPPORTED: Final[str] = "verl>=0.9.1,<0.10"
DISTRIBUTION: Final[str] = "verl"
INSTALL: Final[str] = "pip install 'agentenv-verl[verl]'"


def supported_range() -> str:
    """The supported range as a PEP 440 specifier set (``">=0.9.1,<0.10"``)."""
    return SUPPORTED.removeprefix(DISTRIBUTION)


def check_verl(version: str | None = None) -> str:
    """Return the installed verl version (or ``version``); raise ``ImportError`` naming the fix when it does not fit."""
    return check_trainer(
        SUPPORTED,
        integration="agentenv-verl",
        why="agentenv_verl.loop runs inside verl",
        install=INSTALL,
        version=version,
    )
