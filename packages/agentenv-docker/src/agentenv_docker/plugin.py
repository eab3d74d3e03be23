"""agentenv-docker's plugin: the ``container`` env kind, the ``docker`` sandbox backend and ``agentenv image``.

Importing it runs no docker command (``agentenv`` loads every plugin at start); the engine is asked when a
bundle with a container env loads.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins import CliCommand, EnvKind, hookimpl
from agentenv.records import Sandbox

__all__ = ["agentenv_cli_commands", "agentenv_env_kinds", "agentenv_sandboxes"]


@hookimpl
def agentenv_env_kinds() -> Iterator[EnvKind]:
    from .kind import CONTAINER

    yield CONTAINER


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
