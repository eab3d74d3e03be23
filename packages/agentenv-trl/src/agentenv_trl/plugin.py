"""agentenv-trl's plugin: the TRL integration record and ``agentenv demo``.

Importing it imports neither TRL nor torch (``agentenv`` loads every plugin at start).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, Integration, hookimpl

from ._version import INTEGRATION

__all__ = ["INTEGRATION", "agentenv_cli_commands", "agentenv_integrations"]


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield INTEGRATION


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    what = "train a tiny model on an example bundle with TRL's GRPOTrainer on the CPU (the quickstart)"
    yield CliCommand("demo", what, cli.configure_demo, cli.run_demo)
