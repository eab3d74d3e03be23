"""agentenv-verl's command lines: ``python -m agentenv_verl URL OUT`` (the dataset writer, also ``agentenv verl
write``), ``agentenv verl dapo URL OUT`` and ``agentenv nemo-gym write URL OUT``.

Importing this module does not import verl.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenv.errors import AgentEnvError

from .writer import Written, write

__all__ = [
    "configure_cli",
    "configure_dapo",
    "configure_nemo_gym",
    "configure_write",
    "main",
    "run_cli",
    "run_dapo",
    "run_nemo_gym",
    "run_write",
]


def _add_source(parser: argparse.ArgumentParser, out_help: str, *, by_name: bool = False) -> None:
    """The arguments every writer takes: the server (``by_name``: or a bundle), OUT, the splits, the token's
    variable, progress."""
    add = parser.add_argument
    if by_name:
        add(
            "url",
            metavar="BUNDLE_OR_URL",
            help="the agentenv server (http://host:port), or a bundle's folder or installed name (read from a "
            "bundle played in this process; the loops go to --server-url)",
        )
        add(
            "--server-url",
            metavar="URL",
            help="with a bundle: the server the loops reach in training (default: http://127.0.0.1:8000, where "
            "agentenv serve BUNDLE listens)",
        )
    else:
        add("url", metavar="URL", help="the agentenv server (http://host:port)")
    add("out", metavar="OUT", type=Path, help=out_help)
    add(
        "--split",
        dest="splits",
        action="append",
        metavar="NAME",
        help="write only this split (repeatable; default: every split)",
    )
    add(
        "--token-var",
        metavar="NAME",
        help="the environment variable holding the server's token (read here and in every verl worker)",
    )
    add("--quiet", action="store_true", help="no progress bar")


def _add_play(parser: argparse.ArgumentParser) -> None:
    """How patiently the loops and the reward function play an episode."""
    add = parser.add_argument
    add(
        "--reset-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a deploy or an end of turn may take; also how long after its start a rollout may begin a "
        "replay, and how long a restarting server is waited for (default: 300)",
    )
    add(
        "--attempts",
        type=int,
        default=3,
        metavar="N",
        help="plays of a rollout the env fails before it is given up as failed (default: 3)",
    )


def _add_tokenizer(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--tokenizer",
        metavar="MODEL_OR_PATH",
        help="the policy's tokenizer: count each prompt with its tools as its chat template renders it",
    )
    add(
        "--chat-template-kwargs",
        metavar="JSON",
        default=None,
        help="as verl's data.apply_chat_template_kwargs, e.g. '{\"enable_thinking\": false}'",
    )
    add(
        "--max-prompt-length",
        type=int,
        metavar="N",
        help="refuse rows over N tokens (verl's data.max_prompt_length); needs --tokenizer",
    )


# ---------------------------------------------------------------------------------------------
# write
# ---------------------------------------------------------------------------------------------


def configure_write(parser: argparse.ArgumentParser) -> None:
    """Add the writer's arguments to ``parser``."""
    _add_source(parser, "folder for <split>.parquet and agent_loop.yaml", by_name=True)
    parser.add_argument(
        "--single-turn",
        action="store_true",
        help="single-turn rows (verl's standard fields) scored by agentenv_verl.reward or the "
        "single-turn loop; multi-turn tasks are left out",
    )
    parser.add_argument(
        "--tool-timeout", type=float, default=60.0, metavar="S", help="seconds a tool call may take (default: 60)"
    )
    _add_play(parser)
    _add_tokenizer(parser)


def run_write(args: argparse.Namespace) -> int:
    """Run the writer from parsed arguments; prints what it wrote. Returns the exit code."""
    from ._source import tasks_from

    kwargs = _template_kwargs(args.chat_template_kwargs)
    with tasks_from(args.url, args.server_url) as (url, source):
        written = _write(args, url, source, kwargs)
    _report(written)
    print("verl settings:")
    print(f"  actor_rollout_ref.rollout.agent.agent_loop_config_path={written.agent_loop_config.resolve()}")
    if written.single_turn:
        print(
            f"  actor_rollout_ref.rollout.agent.default_agent_loop={written.agent_name}  (scores in the loop: a "
            "sample without a verdict is masked under the legacy trainer, dropped under V1)"
        )
    _data_settings(written, kwargs)
    return 0


def _write(args: argparse.Namespace, url: str, source: Any, kwargs: dict[str, Any]) -> Written:
    """``write`` with the parsed options, the loops reaching ``url``, the tasks read from ``source`` (or ``url``)."""
    return write(
        url,
        args.out,
        splits=args.splits,
        single_turn=args.single_turn,
        token_var=args.token_var,
        tool_timeout=args.tool_timeout,
        reset_timeout=args.reset_timeout,
        attempts=args.attempts,
        tokenizer=args.tokenizer,
        chat_template_kwargs=kwargs,
        max_prompt_length=args.max_prompt_length,
        progress=None if args.quiet else sys.stderr,
        source=source,
    )


def _report(written: Written) -> None:
    for split, path in written.files.items():
        count = written.rows[split]
        print(f"wrote {path} ({count} row{'s' if count != 1 else ''}, data_source {written.data_source})")
    for split, tasks in written.left_out.items():
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        print(
            f"left out {len(tasks)} multi-turn task(s) of {split} ({shown}): train them with AgentEnvAgentLoop "
            "(write without --single-turn)"
        )
    print(f"wrote {written.agent_loop_config} (loops {', '.join(_loop_names(written))})")
    if written.longest:
        print(f"longest prompt with its tools: {written.longest[0]}")
    else:
        print("prompt lengths not counted: pass --tokenizer MODEL_OR_PATH to count them")


def _loop_names(written: Written) -> list[str]:
    import yaml

    return [str(entry["name"]) for entry in yaml.safe_load(written.agent_loop_config.read_text(encoding="utf-8"))]


def _data_settings(written: Written, kwargs: dict[str, Any]) -> None:
    train = written.files.get("train")
    if train is not None:
        print(f"  data.train_files={train.resolve()}")
    for split in ("eval", "validation", "test"):
        if written.rows.get(split):
            print(f"  data.val_files={written.files[split].resolve()}")
            break
    if written.longest:
        print(f"  data.max_prompt_length={written.longest[0].tokens}  (at least)")
    for key, value in kwargs.items():  # one override per key: hydra refuses new keys in verl's empty dict
        print(f"  +data.apply_chat_template_kwargs.{key}={json.dumps(value)}")


def _template_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AgentEnvError(
            f"--chat-template-kwargs is not JSON ({exc.msg}); write an object, e.g. '{{\"enable_thinking\": false}}'"
        ) from None
    if not isinstance(value, dict):
        raise AgentEnvError(
            f"--chat-template-kwargs is a JSON {type(value).__name__}; write an object, "
            "e.g. '{\"enable_thinking\": false}'"
        )
    return value


# ---------------------------------------------------------------------------------------------
# dapo
# ---------------------------------------------------------------------------------------------


def configure_dapo(parser: argparse.ArgumentParser) -> None:
    """Add ``agentenv verl dapo``'s arguments to ``parser``."""
    _add_source(parser, "folder for the rows, agent_loop.yaml, agentenv_reward.py and dapo.yaml")
    _add_play(parser)
    add = parser.add_argument
    add(
        "--max-response-length",
        type=int,
        default=4096,
        metavar="N",
        help="data.max_response_length, and the overlong penalty's max_resp_len (default: 4096)",
    )
    add(
        "--overlong-buffer",
        type=int,
        default=1024,
        metavar="N",
        help="the last N tokens before --max-response-length are penalised, linearly (default: 1024)",
    )
    add(
        "--penalty-factor",
        type=float,
        default=1.0,
        metavar="F",
        help="the overlong penalty at --max-response-length (default: 1.0)",
    )
    add(
        "--clip-ratio-high",
        type=float,
        default=0.28,
        metavar="R",
        help="DAPO's upper clip ratio (clip-higher; the lower stays 0.2) (default: 0.28)",
    )
    add("--rollout-n", type=int, default=16, metavar="N", help="responses per prompt, a GRPO group (default: 16)")
    _add_tokenizer(parser)


def run_dapo(args: argparse.Namespace) -> int:
    """Run ``agentenv verl dapo``; prints what it wrote and how to start verl. Returns the exit code."""
    from .dapo import write_dapo

    kwargs = _template_kwargs(args.chat_template_kwargs)
    dapo = write_dapo(
        args.url,
        args.out,
        splits=args.splits,
        token_var=args.token_var,
        reset_timeout=args.reset_timeout,
        attempts=args.attempts,
        max_response_length=args.max_response_length,
        overlong_buffer=args.overlong_buffer,
        penalty_factor=args.penalty_factor,
        clip_ratio_high=args.clip_ratio_high,
        rollout_n=args.rollout_n,
        tokenizer=args.tokenizer,
        chat_template_kwargs=kwargs,
        max_prompt_length=args.max_prompt_length,
        progress=None if args.quiet else sys.stderr,
    )
    _report(dapo.written)
    print(f"wrote {dapo.reward_module} (compute_score bound to {args.url})")
    print(f"wrote {dapo.config}")
    print("start verl with it:")
    print(
        f"  python -m verl.trainer.main_ppo --config-path {dapo.config.parent} --config-name dapo "
        "actor_rollout_ref.model.path=MODEL ..."
    )
    return 0


# ---------------------------------------------------------------------------------------------
# agentenv verl, agentenv nemo-gym, python -m agentenv_verl
# ---------------------------------------------------------------------------------------------


def configure_cli(parser: argparse.ArgumentParser) -> None:
    """``agentenv verl``: its subcommands."""
    sub = parser.add_subparsers(dest="verl_command", metavar="COMMAND")
    configure_write(
        sub.add_parser(
            "write",
            help="write a served bundle's tasks as verl datasets",
            description="Write a served bundle's tasks as verl datasets.",
        )
    )
    dapo = "Write a DAPO run on a served bundle: single-turn rows, a reward module bound to the server, a verl config."
    configure_dapo(sub.add_parser("dapo", help="write a DAPO run: rows, reward module, verl config", description=dapo))


def run_cli(args: argparse.Namespace) -> int:
    """Run ``agentenv verl COMMAND``."""
    if args.verl_command == "write":
        return run_write(args)
    if args.verl_command == "dapo":
        return run_dapo(args)
    print("usage: agentenv verl {write,dapo} URL OUT [options] (see agentenv verl write --help)", file=sys.stderr)
    return 2


def configure_nemo_gym(parser: argparse.ArgumentParser) -> None:
    """``agentenv nemo-gym``: its subcommand ``write``."""
    sub = parser.add_subparsers(dest="gym_command", metavar="COMMAND")
    write_parser = sub.add_parser(
        "write",
        help="write a served bundle's tasks as NeMo Gym JSONL rows",
        description="Write a served bundle's tasks as NeMo Gym JSONL rows.",
    )
    _add_source(write_parser, "folder for <split>.jsonl")
    write_parser.add_argument(
        "--reset-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a probe's deploy may take (default: 300)",
    )
    write_parser.add_argument(
        "--agent-name",
        metavar="NAME",
        help="add agent_ref {type: responses_api_agents, name: NAME} to every row (NeMo Gym's "
        "data preparation adds it otherwise)",
    )


def run_nemo_gym(args: argparse.Namespace) -> int:
    """Run ``agentenv nemo-gym write``; prints what it wrote."""
    if args.gym_command != "write":
        print("usage: agentenv nemo-gym write URL OUT [options]", file=sys.stderr)
        return 2
    from .nemo_gym import write_nemo_gym

    written = write_nemo_gym(
        args.url,
        args.out,
        splits=args.splits,
        token_var=args.token_var,
        reset_timeout=args.reset_timeout,
        agent_name=args.agent_name,
        progress=None if args.quiet else sys.stderr,
    )
    for split, path in written.files.items():
        count = written.rows[split]
        print(f"wrote {path} ({count} row{'s' if count != 1 else ''}, data_source {written.data_source})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentenv_verl URL OUT``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m agentenv_verl", description="Write a served bundle's tasks as verl datasets."
    )
    configure_write(parser)
    args = parser.parse_args(argv)
    try:
        return run_write(args)
    except AgentEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
