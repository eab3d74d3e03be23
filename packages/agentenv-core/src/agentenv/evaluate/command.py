"""``agentenv eval``: the flags, and what the command prints."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from agentenv.errors import AgentEnvError

__all__ = ["HELP", "configure", "run"]

HELP = "evaluate a model on an OpenAI-compatible endpoint on a bundle's split: pass@k, results file, --compare"


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 1,4") from None


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags of ``agentenv eval``."""
    parser.add_argument(
        "target",
        nargs="?",
        metavar="BUNDLE_OR_URL",
        help="a bundle folder or an installed bundle's name (played in this process), or an agentenv server's URL",
    )
    model = parser.add_argument_group("the model")
    model.add_argument("--llm-url", help="the OpenAI-compatible API's base URL, e.g. http://localhost:8000/v1")
    model.add_argument("--model", help="the model name the endpoint serves")
    model.add_argument(
        "--api-key-var",
        metavar="NAME",
        help="the variable holding the endpoint's API key (default: OPENAI_API_KEY when set)",
    )
    model.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    model.add_argument("--max-tokens", type=int, help="most tokens per completion (default: the endpoint's)")
    model.add_argument("--request-timeout", type=float, default=600.0, help="seconds a completion may take")
    run_ = parser.add_argument_group("the run")
    run_.add_argument("--split", default="eval", type=_names, help="split(s) to play, comma-separated (default eval)")
    run_.add_argument("-n", "--samples", type=int, default=1, help="plays per task (default 1)")
    run_.add_argument("--concurrency", type=int, default=8, help="samples played at once (default 8)")
    run_.add_argument("--max-turns", type=int, default=10, help="completions per task turn (default 10)")
    run_.add_argument(
        "--attempts", type=int, default=3, help="episodes per sample when the env or server loses one (default 3)"
    )
    run_.add_argument("--tasks", type=_names, default=[], help="only these task ids, comma-separated")
    run_.add_argument("--limit", type=int, help="only the first N tasks of each split")
    run_.add_argument("--pass-k", type=_ints, help="the k of each pass@k, comma-separated (default 1 and -n)")
    run_.add_argument("--pass-threshold", type=float, default=1.0, help="the reward a sample needs to pass (default 1)")
    run_.add_argument("--token-var", metavar="NAME", help="the variable holding the agentenv server's token")
    run_.add_argument("--tool-timeout", type=float, default=60.0, help="seconds a tool call may take")
    run_.add_argument("--reset-timeout", type=float, default=300.0, help="seconds a deploy or an end of turn may take")
    run_.add_argument("--out", type=Path, help="the results folder (default evals/BUNDLE-MODEL)")
    run_.add_argument(
        "--resume", action="store_true", help="continue the run in --out without replaying finished samples"
    )
    run_.add_argument(
        "--record",
        type=Path,
        metavar="DIR",
        help="write the record of every episode to DIR (a bundle folder only; agentenv view DIR shows them)",
    )
    compare = parser.add_argument_group("comparing runs")
    compare.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="print B against A (two summary.json files or --out folders) and exit",
    )
    compare.add_argument("--json", action="store_true", help="with --compare: print the whole comparison as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``agentenv eval``; returns the exit code."""
    from agentenv.evaluate.report import compare
    from agentenv.evaluate.summary import Summary

    if args.compare:
        a, b = (Summary.read(path) for path in args.compare)
        comparison = compare(a, b, a_name=str(args.compare[0]), b_name=str(args.compare[1]))
        print(json.dumps(comparison.as_dict(), indent=2) if args.json else comparison.table())
        return 0
    missing = [
        flag
        for flag, value in (("BUNDLE_OR_URL", args.target), ("--llm-url", args.llm_url), ("--model", args.model))
        if not value
    ]
    if missing:
        raise AgentEnvError(f"agentenv eval needs {', '.join(missing)} (or --compare A B); see agentenv eval --help")
    from agentenv.evaluate.chat import Endpoint
    from agentenv.evaluate.runner import EvalConfig, run_eval

    key_var = args.api_key_var or ("OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None)
    endpoint = Endpoint(
        args.llm_url,
        args.model,
        api_key_var=key_var,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        timeout=args.request_timeout,
    )
    config = EvalConfig(
        target=args.target,
        endpoint=endpoint,
        splits=tuple(args.split),
        samples=args.samples,
        concurrency=args.concurrency,
        max_turns=args.max_turns,
        attempts=args.attempts,
        out=args.out,
        resume=args.resume,
        token_var=args.token_var,
        tasks=tuple(args.tasks),
        limit=args.limit,
        ks=args.pass_k,
        threshold=args.pass_threshold,
        tool_timeout=args.tool_timeout,
        reset_timeout=args.reset_timeout,
        record=args.record,
    )
    try:
        summary = run_eval(config)
    except KeyboardInterrupt:  # each finished sample is on disk already: say how to play only the rest
        where = str(args.out) if args.out else "the --out folder (by default evals/BUNDLE-MODEL)"
        again = "the same command" if args.resume else "the same command with --resume"
        print(
            f"\ninterrupted: every finished sample is kept in {where}; to play only the rest, run {again}",
            file=sys.stderr,
        )
        raise
    run_ = summary.run
    print(
        f"{run_['model']} on {run_['bundle']} ({', '.join(run_['splits'])}): {run_['samples']} sample(s) per task, "
        f"temperature {run_['temperature']:g}, pass: reward >= {summary.threshold:g}\n"
    )
    print(summary.table())
    out = Path(run_["out"])
    print(f"\nresults: {out / 'results.jsonl'}\nsummary: {out / 'summary.json'}")
    if summary.overall.context_limited:
        print(
            f"note: {summary.overall.context_limited} sample(s) outgrew the model's context (scored as they stood): "
            "raise the server's context length (vLLM: --max-model-len) or lower --max-turns / --max-tokens",
            file=sys.stderr,
        )
    return 0
