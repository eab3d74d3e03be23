"""agentenv-harness's plugin: the coding-agent kinds, ``agentenv run``, and the integration's TRL and OpenEnv ranges.

Importing it imports neither TRL nor OpenEnv (``agentenv`` loads every plugin at start).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import AgentKind, CliCommand, Integration, hookimpl

from ._version import OPENENV, TRL

__all__ = ["agentenv_agent_kinds", "agentenv_cli_commands", "agentenv_integrations"]


@hookimpl
def agentenv_integrations() -> Iterator[Integration]:
    yield TRL
    yield OPENENV


@hookimpl
def agentenv_agent_kinds() -> Iterator[AgentKind]:
    from .kinds import HARNESS_AGENT_KINDS

    yield from HARNESS_AGENT_KINDS


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    what = "play a task with the agents it deploys against a model endpoint; print its reward and scores"
    yield CliCommand("run", what, cli.configure_run, cli.run_run)
