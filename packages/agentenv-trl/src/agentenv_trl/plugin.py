"""agentenv-trl's plugin: the TRL integration record and ``agentenv demo``.

Importing it imports neither TRL nor torch (``agentenv`` loads every plugin at start).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Iterator

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
    yield CliCommand("demo", what, cli.configure_demo, _without_experimental_notices(cli.run_demo))


# TRL warns that environment_factory (and anything from trl.experimental) is experimental. The demo is
# agentenv's own command, so it says nothing the user can act on there; it is silenced for the command
# only, never for a process that imports agentenv_trl (a user's training script still sees it).
EXPERIMENTAL_NOTICES = ("You are using 'environment_factory'", "You are importing from 'trl.experimental'")


def _without_experimental_notices(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def quiet(args: argparse.Namespace) -> int:
        with warnings.catch_warnings():
            for notice in EXPERIMENTAL_NOTICES:
                warnings.filterwarnings("ignore", notice)
            return run(args)

    return quiet
