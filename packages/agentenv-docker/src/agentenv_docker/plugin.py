"""agentenv-docker's plugin: the ``container`` and ``harbor`` env kinds, the ``harbor`` task source and verifier
kind, the ``docker`` sandbox backend and ``agentenv image``.

Importing it runs no docker command (``agentenv`` loads every plugin at start); the engine is asked when a
bundle with a container env loads.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, EnvKind, Sandbox, TaskSource, VerifierKind, hookimpl

__all__ = [
    "agentenv_cli_commands",
    "agentenv_env_kinds",
    "agentenv_sandboxes",
    "agentenv_task_sources",
    "agentenv_verifier_kinds",
]


@hookimpl
def agentenv_env_kinds() -> Iterator[EnvKind]:
    from .harbor_env import HARBOR_ENV
    from .kind import CONTAINER

    yield CONTAINER
    yield HARBOR_ENV


@hookimpl
def agentenv_task_sources() -> Iterator[TaskSource]:
    from .harbor_tasks import read_harbor_tasks  # harbor itself is imported when a bundle reads from it

    yield TaskSource("harbor", read_harbor_tasks)


@hookimpl
def agentenv_verifier_kinds() -> Iterator[VerifierKind]:
    from .harbor_env import HARBOR_VERIFIER

    yield HARBOR_VERIFIER


@hookimpl
def agentenv_sandboxes() -> Iterator[Sandbox]:
    def create() -> object:
        from .sandbox import DockerSandbox

        return DockerSandbox()

    yield Sandbox("docker", create, "each program the policy steers in a container of its own (--network none)")


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    from . import cli

    what = "build the images of a bundle's container envs, or a Python base image"
    yield CliCommand("image", what, cli.configure, cli.run)
