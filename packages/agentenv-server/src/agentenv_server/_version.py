"""agentenv-server's version, read by its face and by what the server reports about itself."""

from __future__ import annotations

from typing import Final

__all__ = ["__version__"]

__version__: Final[str] = "0.2.0"
