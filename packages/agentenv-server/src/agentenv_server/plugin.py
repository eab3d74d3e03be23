"""agentenv-server's plugin: the ``agentenv serve`` command."""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, hookimpl


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    yield CliCommand("serve", "serve a bundle as an OpenEnv environment server", cli.configure, cli.run)
