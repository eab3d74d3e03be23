"""agentenv-verl's plugin: the verl integration record (its loop, by name and import path) and ``agentenv verl``.

Importing it does not import verl.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from agentenv.plugins import CliCommand, Integration, hookimpl

from ._version import DISTRIBUTION, supported_range

__all__ = ["AGENT_LOOP", "AGENT_LOOP_NAME", "INTEGRATION", "agentenv_cli_commands", "agentenv_integrations"]

AGENT_LOOP: Final[str] = "agentenv_verl.loop:AgentEnvAgentLoop"
AGENT_LOOP_NAME: Final[str] = "agentenv"

INTEGRATION: Final[Integration] = Integration(
    name="verl",
    distribution=DISTRIBUTION,
    supported=supported_range(),
    offers={"agent_loop": AGENT_LOOP, "agent_loop_name": AGENT_LOOP_NAME, "writer": "agentenv_verl.writer:write"},
)


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
