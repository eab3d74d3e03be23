"""agentenv-server's plugin: the ``agentenv serve`` command, and Ray Serve's record (``agentenv serve --ray``).

Importing it imports neither the server stack nor Ray (``agentenv`` loads every plugin at start).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from agentenv.plugins import CliCommand, Integration, hookimpl

__all__ = ["RAY", "agentenv_cli_commands", "agentenv_integrations"]

# The Ray range is the ``ray`` extra of agentenv-server's pyproject.toml, read from the installed metadata.
RAY: Final[Integration] = Integration(
    name="ray", package="agentenv-server", trainer="ray", offers={"serve": "agentenv_server.ray:deploy"}
)


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield RAY


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    yield CliCommand("serve", "serve a bundle as an OpenEnv environment server", cli.configure, cli.run)
    from . import view

    yield CliCommand("view", view.HELP, view.configure, view.run)
