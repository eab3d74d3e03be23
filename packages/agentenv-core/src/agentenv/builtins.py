"""The core's own plugin: the built-in env kinds, verifier kinds, task source, reward rules and commands."""

from __future__ import annotations

from collections.abc import Iterator

from .plugins import CliCommand, EnvKind, RewardRule, TaskSource, VerifierKind, hookimpl


@hookimpl
def agentenv_env_kinds() -> Iterator[EnvKind]:
    from .envkinds import ENV_KINDS

    yield from ENV_KINDS


@hookimpl
def agentenv_verifier_kinds() -> Iterator[VerifierKind]:
    from .verifiers import VERIFIER_KINDS

    yield from VERIFIER_KINDS


@hookimpl
def agentenv_task_sources() -> Iterator[TaskSource]:
    from .dataset_tasks import read_dataset_tasks
    from .tasksources import read_yaml_tasks

    yield TaskSource("yaml", read_yaml_tasks)
    yield TaskSource("dataset", read_dataset_tasks)


@hookimpl
def agentenv_reward_rules() -> Iterator[RewardRule]:
    from .verifiers import REWARD_RULES

    yield from REWARD_RULES


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    yield CliCommand(
        "tasks", "list a bundle's tasks: id, split, turns, toolset key", cli.configure_tasks, cli.run_tasks
    )
    yield CliCommand(
        "play",
        "play a task from the terminal, a JSON script or its reference solution",
        cli.configure_play,
        cli.run_play,
    )
    yield CliCommand(
        "check", "validate a bundle and deploy one episode per toolset", cli.configure_check, cli.run_check
    )
    from .evaluate import command as evaluate

    yield CliCommand("eval", evaluate.HELP, evaluate.configure, evaluate.run)
    yield CliCommand(
        "plugins",
        "installed plugins, their hooks, and each integration's trainer range",
        cli.configure_plugins,
        cli.run_plugins,
    )
