"""``agentenv demo``: the quickstart on the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .controls import REWARD_SOURCES

if TYPE_CHECKING:
    from agentenv_trl.demo import DemoConfig

__all__ = ["configure_demo", "demo_config", "run_demo"]


def configure_demo(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv demo``; each left out takes ``DemoConfig``'s default (stated in the help)."""
    parser.add_argument("--bundle", type=Path, help="the bundle to train on (default: the arith example)")
    parser.add_argument("--model", help="a local model folder to train instead of the tiny one built here")
    parser.add_argument("--steps", type=int, help="GRPO steps (default: 40; --quick: 2)")
    parser.add_argument(
        "--warm-start",
        type=int,
        dest="warm_start",
        metavar="STEPS",
        help="supervised steps on the reference solutions first (default: 1000 for the tiny model, "
        "0 with --model; --quick: 60)",
    )
    parser.add_argument(
        "--text-answers",
        type=float,
        dest="text_answers",
        metavar="SHARE",
        help="the share of warm-start conversations that answer in plain text instead of with end_turn (and so "
        "score 0): the room GRPO has to improve (default: 0.7)",
    )
    parser.add_argument("--generations", type=int, help="rollouts per prompt (default: 4)")
    parser.add_argument("--prompts-per-step", type=int, help="prompts per GRPO step (default: 8; --quick: 2)")
    parser.add_argument("--eval-generations", type=int, help="rollouts per eval task (default: 4; --quick: 2)")
    parser.add_argument(
        "--learning-rate", type=float, help="GRPO learning rate (default: 5e-4 for the tiny model, 1e-6 with --model)"
    )
    parser.add_argument(
        "--reward",
        choices=REWARD_SOURCES,
        help="what GRPO trains on (default: env, the served bundle's reward); the control arms: shuffled (the env's "
        "rewards shuffled within each group of rollouts) or constant (1.0 for every rollout)",
    )
    parser.add_argument("--seed", type=int, help="random seed (default: 0)")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default: 1 for the tiny model; the same count gives the same numbers)",
    )
    parser.add_argument("--quick", action="store_true", help="a short run (CI): 2 GRPO steps after a brief warm start")
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="where to write steps.csv, report.json and reward.png (default: agentenv-demo/<time>-seed<N>)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write what was measured as JSON")


# flag destination -> DemoConfig field
_FIELDS = {
    "bundle": "bundle",
    "model": "model",
    "steps": "steps",
    "warm_start": "warm_start_steps",
    "generations": "num_generations",
    "prompts_per_step": "prompts_per_step",
    "eval_generations": "eval_generations",
    "learning_rate": "learning_rate",
    "text_answers": "text_answers",
    "reward": "reward",
    "seed": "seed",
    "threads": "threads",
    "output_dir": "output_dir",
}


def demo_config(args: argparse.Namespace) -> DemoConfig:
    """The ``DemoConfig`` the parsed flags ask for: the flags given, over ``DemoConfig()`` or ``DemoConfig.quick()``."""
    from agentenv_trl.demo import DemoConfig

    options = {field: getattr(args, flag) for flag, field in _FIELDS.items() if getattr(args, flag) is not None}
    return DemoConfig.quick(**options) if args.quick else DemoConfig(**options)


def run_demo(args: argparse.Namespace) -> int:
    """Run the quickstart; 0 when it trained and measured."""
    from agentenv.errors import AgentEnvError
    from agentenv.files import write_file

    try:
        from agentenv_trl.demo import run_demo as run
    except ImportError as exc:  # TRL missing or outside the supported range: the message says what to install
        raise AgentEnvError(str(exc)) from None

    report = run(demo_config(args))
    if args.json is not None:
        write_file(args.json, json.dumps(report.as_dict(), indent=2, default=str))
    return 0
