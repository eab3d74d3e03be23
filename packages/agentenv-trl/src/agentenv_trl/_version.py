"""The TRL versions agentenv-trl supports, declared once, and the check run when the integration loads."""

from __future__ import annotations

from typing import Final

from agentenv.plugins import check_trainer
from packaging.requirements import Requirement

__all__ = ["DISTRIBUTION", "INSTALL", "SUPPORTED", "__version__", "check_trl", "supported_range"]

__version__: Final[str] = "0.1.0"

SUPPORTED: Final[str] = "trl>=1.16.0,<1.17"
DISTRIBUTION: Final[str] = "trl"
INSTALL: Final[str] = "pip install 'agentenv-trl[trl]'"


def supported_range() -> str:
    """The supported range as a PEP 440 specifier set, as declared (``">=1.16.0,<1.17"``)."""
    return SUPPORTED[len(Requirement(SUPPORTED).name) :].strip()


def check_trl(version: str | None = None) -> str:
    """Return the installed TRL version (or ``version``); raise ``ImportError`` naming the fix when it does not fit.

    Reads the installed distribution's metadata only: TRL itself is not imported.
    """
    return check_trainer(
        SUPPORTED,
        integration=f"agentenv-trl {__version__}",
        why="agentenv_trl trains with TRL",
        install=INSTALL,
        version=version,
    )
