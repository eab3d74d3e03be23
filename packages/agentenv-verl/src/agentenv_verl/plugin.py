"""agentenv-verl's plugin: the verl integration record (its loop, by name and import path) and ``agentenv verl``.

Importing it does not import verl.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, Integration, hookimpl

from ._version import AGENT_LOOP, AGENT_LOOP_NAME, INTEGRATION

__all__ = ["AGENT_LOOP", "AGENT_LOOP_NAME", "INTEGRATION", "agentenv_cli_commands", "agentenv_integrations"]


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield INTEGRATION


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import writer

    yield CliCommand(
        "verl",
        "verl: write a bundle's tasks as verl datasets (agentenv verl write URL OUT)",
        writer.configure_cli,
        writer.run_cli,
    )
