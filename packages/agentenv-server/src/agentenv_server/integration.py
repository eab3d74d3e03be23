"""Ray Serve's record (``agentenv serve --ray``): the range agentenv-server supports, read where the plugin and the
deployment both need it, without importing either."""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration

__all__ = ["RAY"]

# The Ray range is the ``ray`` extra of agentenv-server's pyproject.toml, read from the installed metadata.
RAY: Final[Integration] = Integration(
    name="ray", package="agentenv-server", trainer="ray", offers={"serve": "agentenv_server.ray:deploy"}
)
