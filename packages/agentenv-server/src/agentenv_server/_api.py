"""The OpenEnv internals agentenv-server leans on, named once and probed when ``agentenv_server.app`` loads.

The server is OpenEnv's ``HTTPEnvServer`` with one private method extended (``_create_session``, for a
capacity error that names the fix) and its routes filtered by path. ``agentenv.plugins.internals.probe``
refuses, naming the OpenEnv version installed, the range agentenv-server supports and the missing name.
"""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration, Internal, internals

__all__ = ["OPENENV", "OPENENV_INTERNALS", "check_internals"]

# agentenv-server's OpenEnv range: its dependency (pyproject.toml), read from the installed metadata
OPENENV: Final[Integration] = Integration(name="server-openenv", package="agentenv-server", trainer="openenv")

_SERVER = "openenv.core.env_server"

OPENENV_INTERNALS: Final[tuple[Internal, ...]] = (
    Internal(
        f"{_SERVER}.http_server:HTTPEnvServer",
        parameters=("env", "action_cls", "observation_cls", "max_concurrent_envs", "env_name"),
    ),
    Internal(f"{_SERVER}.http_server:HTTPEnvServer._create_session"),
    Internal(f"{_SERVER}.http_server:HTTPEnvServer.register_routes", parameters=("app",)),
    Internal(f"{_SERVER}.exceptions:SessionCapacityError", attributes=("active_sessions", "max_sessions")),
    Internal(f"{_SERVER}.interfaces:Environment"),
    Internal(f"{_SERVER}.types:Action"),
    Internal(f"{_SERVER}.types:Observation"),
    Internal(f"{_SERVER}.types:State"),
    Internal(f"{_SERVER}.types:EnvironmentMetadata"),
)


def check_internals() -> None:
    """Probe OpenEnv's internals the server uses (``MissingInternal`` naming the one that is gone)."""
    internals.probe(OPENENV, OPENENV_INTERNALS)
