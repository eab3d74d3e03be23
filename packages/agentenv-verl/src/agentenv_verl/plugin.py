"""agentenv-verl's plugin: the verl integration record (its loops, by name and import path), ``agentenv verl`` and
``agentenv nemo-gym``.

Importing it does not import verl.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, Integration, hookimpl

from ._version import AGENT_LOOP, AGENT_LOOP_NAME, INTEGRATION, SINGLE_TURN_LOOP, SINGLE_TURN_LOOP_NAME

__all__ = [
    "AGENT_LOOP",
    "AGENT_LOOP_NAME",
    "INTEGRATION",
    "SINGLE_TURN_LOOP",
    "SINGLE_TURN_LOOP_NAME",
    "agentenv_cli_commands",
    "agentenv_integrations",
]


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield INTEGRATION


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    yield CliCommand(
        "verl",
        "verl: write a bundle's tasks as verl datasets (agentenv verl write URL OUT), or a DAPO run (verl dapo)",
        cli.configure_cli,
        cli.run_cli,
    )
    yield CliCommand(
        "nemo-gym",
        "NeMo Gym: write a bundle's tasks as NeMo Gym JSONL rows (agentenv nemo-gym write URL OUT)",
        cli.configure_nemo_gym,
        cli.run_nemo_gym,
    )
