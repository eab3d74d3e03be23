"""agentenv-server's plugin: the ``agentenv serve`` command, and Ray Serve's record (``agentenv serve --ray``).

Importing it imports neither the server stack nor Ray (``agentenv`` loads every plugin at start).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, Integration, hookimpl

from .integration import RAY

__all__ = ["RAY", "agentenv_cli_commands", "agentenv_integrations"]


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield RAY


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    yield CliCommand("serve", "serve a bundle as an OpenEnv environment server", cli.configure, cli.run)
    from . import view

    yield CliCommand("view", view.HELP, view.configure, view.run)
