"""The verl versions agentenv-verl supports, declared once, and the check run when the loop loads."""

from __future__ import annotations

import importlib.metadata as md
from typing import Final

__all__ = ["DISTRIBUTION", "INSTALL", "SUPPORTED", "check_verl", "supported_range"]

SUPPORTED: Final[str] = "verl>=0.9.1,<0.10"
DISTRIBUTION: Final[str] = "verl"
INSTALL: Final[str] = "pip install 'agentenv-verl[verl]'"


def supported_range() -> str:
    """The supported range as a PEP 440 specifier set (``">=0.9.1,<0.10"``)."""
    return SUPPORTED.removeprefix(DISTRIBUTION)


def check_verl(version: str | None = None) -> str:
    """Return the installed verl version (or ``version``); raise ``ImportError`` naming the fix when it does not fit."""
    from packaging.requirements import Requirement  # here: the plugin imports this module on every CLI run

    if version is None:
        try:
            version = md.version(DISTRIBUTION)
        except md.PackageNotFoundError:
            raise ImportError(
                f"agentenv_verl.loop runs inside verl ({SUPPORTED}), which is not installed: {INSTALL}"
            ) from None
    if not Requirement(SUPPORTED).specifier.contains(version, prereleases=True):
        raise ImportError(
            f"agentenv-verl supports {SUPPORTED}, but verl {version} is installed: "
            f"pip install '{SUPPORTED}' (or {INSTALL})"
        )
    return version
