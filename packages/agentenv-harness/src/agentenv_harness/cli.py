"""``agentenv run``: play a task with the agents it deploys against a model endpoint, and print its scores.

What a user runs to evaluate an agent on a task, or to debug a task before training on it::

    agentenv run examples/bundles/coding fix-001 --llm-url http://localhost:8000/v1 --model Qwen/Qwen3-8B
    agentenv run BUNDLE TASK --llm-url URL --model NAME --agent claude-code   # another solver
    agentenv run BUNDLE TASK --llm-url URL --model NAME --capture             # through the capture proxy
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from agentenv import interrupts
from agentenv.errors import AgentEnvError

__all__ = ["configure_run", "run_run"]


def configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle's folder, or an installed bundle's name (agentenv bundles)")
    parser.add_argument("task_id", help="the task to play")
    parser.add_argument("--llm-url", required=True, help="the solver's endpoint (OpenAI-compatible base URL)")
    parser.add_argument("--model", required=True, help="the model the solver asks for")
    parser.add_argument("--agent", help="swap the solver: an agent of the bundle or an agent kind (claude-code...)")
    parser.add_argument("--key-var", help="the environment variable holding the endpoint's key")
    what = "go through OpenEnv's capture proxy and report the trainable turns (needs token ids)"
    parser.add_argument("--capture", action="store_true", help=what)
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds the whole run may take")
    parser.add_argument("--tool-timeout", type=float, default=60.0, help="seconds a tool call may take")
    parser.add_argument("--deploy-timeout", type=float, default=300.0, help="seconds the deploy may take")
    parser.add_argument("--keep", action="store_true", help="keep the agents' folders (printed) for a look")
    parser.add_argument(
        "--record", metavar="DIR", help="write the episode's record to DIR (agentenv view DIR shows it)"
    )


def run_run(args: argparse.Namespace) -> int:
    import os

    from agentenv.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    try:
        task = bundle.task(args.task_id)
    except KeyError as exc:
        raise AgentEnvError(exc.args[0]) from None
    key = None
    if args.key_var:
        key = os.environ.get(args.key_var)
        if not key:
            raise AgentEnvError(f"--key-var {args.key_var}: ${args.key_var} is not set; export it")
    _require_solver(bundle, task, args.agent)
    from agentenv.local import Here

    here = Here(bundle, tool_timeout=args.tool_timeout, reset_timeout=args.deploy_timeout, record=args.record)
    report, captured = interrupts.run(_run(here, task, args, key))
    _print(report, captured, args)
    return 0 if report.result.outcome == "scored" else 1


def _require_solver(bundle: Any, task: Any, agent: str | None) -> None:
    """Refuse, before any deploy, a solver whose program is not installed, saying how to install it."""
    from .tasks import solver_for

    spec = solver_for(bundle, agent)
    step = task.deployed("solver")
    if spec is None and step is not None and step.agent in bundle.agents:
        spec = bundle.agents[step.agent]
    kind = (bundle.plugin_set.agent_kinds() if bundle.plugin_set else {}).get(spec.kind) if spec else None
    missing = kind.missing(spec, bundle.path) if kind is not None else None
    if missing:
        raise AgentEnvError(f"{missing}; then run again (agentenv plugins shows which agent kinds run here)")


async def _run(here: Any, task: Any, args: argparse.Namespace, key: str | None) -> tuple[Any, Any]:
    """Play ``task`` in this process (``here``: ``agentenv.local.Here``), closing ``here`` after."""
    try:
        return await _play(here, task, args, key)
    finally:
        await here.aclose()


async def _play(here: Any, task: Any, args: argparse.Namespace, key: str | None) -> tuple[Any, Any]:
    import httpx
    from agentenv.client import Session
    from agentenv.launch import Endpoint

    from .capture import CaptureProxy, require_tokens
    from .play import Play
    from .tasks import solver_for

    bundle = here.bundle
    solver = solver_for(bundle, args.agent)
    kinds = bundle.plugin_set.agent_kinds() if bundle.plugin_set else {}
    episode = Session(here.shared(client="agentenv run"))
    if not args.capture:
        policy = Endpoint(args.llm_url, args.model, key)
        play = Play(
            bundle,
            task,
            episode,
            policy=policy,
            kinds=kinds,
            solver=solver,
            deadline=args.deadline,
            keep_workdir=args.keep,
        )
        return await play.run(), None
    await asyncio.to_thread(require_tokens, args.llm_url, args.model)
    proxy = await asyncio.to_thread(CaptureProxy, args.llm_url, args.model)
    try:
        async with httpx.AsyncClient(timeout=120.0, trust_env=False) as http:
            session = await proxy.open(http, model=args.model, metadata={"task_id": task.id})
            play = Play(
                bundle,
                task,
                episode,
                policy=Endpoint(f"{proxy.url}/v1", args.model, session),
                kinds=kinds,
                solver=solver,
                deadline=args.deadline,
                model_calls=lambda: proxy.calls(session),
                keep_workdir=args.keep,
            )
            report = await play.run()
            try:
                captured: Any = proxy.trace(session)
            except Exception as exc:  # shown, not raised: the run's own result is what matters here
                captured = exc
            await proxy.close(http, session)
    finally:
        await asyncio.to_thread(proxy.stop)
    return report, captured


def _print(report: Any, captured: Any, args: argparse.Namespace) -> None:
    from agentenv.text import table

    result = report.result
    rows = [
        (i + 1, r.code, f"{r.seconds:.1f}", r.reply.replace("\n", " ")[:100]) for i, r in enumerate(report.solver_runs)
    ]
    if rows:
        print(table(rows, ("turn", "exit", "seconds", "reply")))
    for step, score in result.scores.items():
        print(f"score {step}: {'no verdict' if score is None else f'{score:g}'}")
    if result.outcome == "scored":
        print(f"reward: {result.reward:g}")
    elif result.outcome == "failed":
        failure = result.failure
        print(f"failed ({failure.kind} during {failure.stage}): {failure.message}")
        print("reward: None (a failed run is never trained on)")
    else:
        print(f"unscored: {result.reason}")
    if captured is not None:
        if isinstance(captured, Exception):
            print(f"capture: not trainable: {captured}")
        else:
            trained = sum(sum(t.loss_mask) for t in captured.turns)
            print(f"capture: {len(captured.turns)} model call(s), {trained} trainable tokens")
    if report.kept is not None:  # --keep: where to look (each agent's work, home and logs/NAME-N.out and .err)
        print(f"kept the agents' folders: {report.kept}")
    print(f"{report.seconds:.1f} s", file=sys.stderr)
