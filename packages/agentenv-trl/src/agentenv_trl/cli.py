"""``agentenv demo``: the quickstart on the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["configure_demo", "run_demo"]


def configure_demo(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv demo``."""
    parser.add_argument("--bundle", type=Path, help="the bundle to train on (default: the arith example)")
    parser.add_argument("--model", help="a local model folder to train instead of the tiny one built here")
    parser.add_argument("--steps", type=int, help="GRPO steps (default: 12; --quick: 2)")
    parser.add_argument(
        "--warm-start",
        type=int,
        dest="warm_start",
        metavar="STEPS",
        help="supervised steps on the reference solutions first (default: 300 for the tiny model, "
        "0 with --model; --quick: 120)",
    )
    parser.add_argument("--generations", type=int, default=4, help="rollouts per prompt (default: 4)")
    parser.add_argument("--prompts-per-step", type=int, default=2, help="prompts per GRPO step (default: 2)")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="GRPO learning rate (default: 1e-4)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--quick", action="store_true", help="a short run (CI): 2 GRPO steps after a brief warm start")
    parser.add_argument("--output-dir", type=Path, help="TRL's output folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write what was measured as JSON")


def run_demo(args: argparse.Namespace) -> int:
    """Run the quickstart; 0 when it trained and measured."""
    from agentenv.errors import AgentEnvError

    try:
        from agentenv_trl.demo import DemoConfig
        from agentenv_trl.demo import run_demo as run
    except ImportError as exc:  # TRL missing or outside the supported range: the message says what to install
        raise AgentEnvError(str(exc)) from None

    options = {
        "bundle": args.bundle,
        "model": args.model,
        "num_generations": args.generations,
        "prompts_per_step": args.prompts_per_step,
        "learning_rate": args.learning_rate,
        "seed": args.seed,
        "output_dir": args.output_dir,
    }
    if args.steps is not None:
        options["steps"] = args.steps
    if args.warm_start is not None:
        options["warm_start_steps"] = args.warm_start
    config = DemoConfig.quick(**options) if args.quick else DemoConfig(**options)
    report = run(config)
    if args.json is not None:
        args.json.write_text(json.dumps(report.as_dict(), indent=2, default=str), encoding="utf-8")
    return 0
