"""agentenv-server's version, read by its face and by what the server reports about itself.

It is written once, in agentenv-server's pyproject.toml, and read here from the installed metadata.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Final

__all__ = ["__version__"]

__version__: Final[str] = version("agentenv-server")
