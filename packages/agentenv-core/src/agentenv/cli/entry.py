"""The ``agentenv`` command line. Its subcommands come from plugins (``agentenv_cli_commands``).

Conventions a plugin's command follows (the built-in ones in ``agentenv.cli.commands`` do):

- ``run(args)`` returns the exit code: 0 when all went well, 1 when what it did found a failure
  (an env that did not deploy, an episode that failed).
- An ``agentenv.AgentEnvError`` it raises is printed as ``error: MESSAGE`` on stderr and exits 2:
  say in the message what happened and what to do. Any other exception is a bug and shows its
  traceback. Ctrl-C exits 130.
- Tables are printed with ``agentenv.text.table(rows, header)``.
- A plugin that was left out is named once on stderr (as a warning) before the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from agentenv.errors import AgentEnvError

if TYPE_CHECKING:
    from agentenv.plugins import CliCommand

__all__ = ["ELSEWHERE", "build_parser", "main"]

# The commands other agentenv wheels add, so that one whose wheel is not installed is named with the wheel
# (tests/unit/core/test_cli.py checks each is the command that wheel registers).
ELSEWHERE: Final[Mapping[str, str]] = {
    "serve": "agentenv-server",
    "view": "agentenv-server",
    "demo": "agentenv-trl",
    "verl": "agentenv-verl",
    "nemo-gym": "agentenv-verl",
    "run": "agentenv-harness",
    "image": "agentenv-docker",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``agentenv`` CLI; returns the exit code."""
    from agentenv.plugins import plugins

    commands = plugins().cli_commands()  # a plugin left out is logged here, once
    elsewhere = _not_here(sys.argv[1:] if argv is None else list(argv), commands)
    if elsewhere:
        print(f"error: {elsewhere}", file=sys.stderr)
        return 2
    parser = build_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return commands[args.command].run(args)
    except AgentEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (agentenv tasks BUNDLE | head): not the command's failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush is quiet
        return 0


def build_parser(commands: Mapping[str, CliCommand] | None = None) -> argparse.ArgumentParser:
    """The ``agentenv`` parser with a subcommand per command (the installed plugins' when not given)."""
    if commands is None:
        from agentenv.plugins import plugins

        commands = plugins().cli_commands()
    more = [f"{name} ({wheel})" for name, wheel in sorted(ELSEWHERE.items()) if name not in commands]
    parser = argparse.ArgumentParser(
        prog="agentenv",
        description="Train LLM agents with RL on bundles of tasks.",
        epilog=f"More commands come with other agentenv wheels: {', '.join(more)}." if more else None,
    )
    parser.add_argument("--version", action=_Versions, help="the version of every installed agentenv wheel")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in sorted(commands):
        command = commands[name]
        command.configure(sub.add_parser(name, help=command.help, description=command.help))
    return parser


class _Versions(argparse.Action):
    """``--version``: each installed agentenv wheel and its version (read only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import distributions

        from agentenv.wire import PROTOCOL

        found = sorted({d.metadata["Name"]: d.version for d in distributions() if _ours(d.metadata["Name"])}.items())
        lines = [f"{name} {version}" for name, version in found] + [f"wire protocol {PROTOCOL}"]
        print("\n".join(lines))
        parser.exit()


def _ours(name: str | None) -> bool:
    return bool(name) and name.lower().replace("_", "-").startswith("agentenv-")


def _not_here(argv: Sequence[str], commands: Mapping[str, CliCommand]) -> str | None:
    """What to say when the command asked for comes with another agentenv wheel than those installed."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    if name is None or name in commands or name not in ELSEWHERE:
        return None
    wheel = ELSEWHERE[name]
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(wheel)
    except PackageNotFoundError:
        return f"'agentenv {name}' comes with {wheel}, which is not installed; install it: pip install {wheel}"
    return f"'agentenv {name}' comes with {wheel}, which is installed but its plugin was left out; see agentenv plugins"


if __name__ == "__main__":
    sys.exit(main())
