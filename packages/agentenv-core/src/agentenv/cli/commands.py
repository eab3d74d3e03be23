"""agentenv-core's commands: ``tasks``, ``play``, ``check`` and ``plugins``, a plugin like any other.

Registered by module name (``agentenv.plugins.BUILTINS``); see ``agentenv.cli`` for the conventions.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentenv.errors import AgentEnvError
from agentenv.plugins.hookspecs import hookimpl
from agentenv.plugins.records import CliCommand
from agentenv.text import table


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    yield CliCommand("tasks", "list a bundle's tasks: id, split, turns, toolset key", configure_tasks, run_tasks)
    yield CliCommand(
        "play", "play a task from the terminal, a JSON script or its reference solution", configure_play, run_play
    )
    yield CliCommand("check", "validate a bundle and deploy one episode per toolset", configure_check, run_check)
    from agentenv.evaluate import command as evaluate  # light: its client and loop load when it runs

    yield CliCommand("eval", evaluate.HELP, evaluate.configure, evaluate.run)
    yield CliCommand(
        "plugins",
        "installed plugins, their hooks, each integration's trainer range, and any left out",
        configure_plugins,
        run_plugins,
    )
    from agentenv.record import export

    yield CliCommand("export", export.HELP, export.configure, export.run)
    from agentenv.cli import scaffold

    yield CliCommand(
        "init", "write a new bundle, or with --package a bundle package", scaffold.configure_init, scaffold.run_init
    )
    yield CliCommand(
        "bundles",
        "bundles installed as packages: name, version, the agentenv-core each needs",
        scaffold.configure_bundles,
        scaffold.run_bundles,
    )


# --- tasks -----------------------------------------------------------------------------------


def configure_tasks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle's folder, or an installed bundle's name (agentenv bundles)")
    parser.add_argument("--split", help="only this split")


def run_tasks(args: argparse.Namespace) -> int:
    from agentenv.bundle import load_bundle  # here: `agentenv --help` loads no bundle machinery

    bundle = load_bundle(args.bundle)
    if args.split and args.split not in bundle.splits:
        raise AgentEnvError(f"no split {args.split!r}; the splits are {', '.join(bundle.splits)}")
    tasks = bundle.split(args.split) if args.split else bundle.tasks
    rows = [(t.id, t.split, bundle.index_of(t), len(t.turns), bundle.toolset_key(t)) for t in tasks]
    print(table(rows, ("id", "split", "index", "turns", "toolset")))
    keys = {bundle.toolset_key(t) for t in tasks}
    print(
        f"\n{len(rows)} tasks, {len(keys)} toolset{'s' if len(keys) != 1 else ''}, splits: {', '.join(bundle.splits)}"
    )
    return 0


# --- play ------------------------------------------------------------------------------------


def configure_play(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle's folder, or an installed bundle's name (agentenv bundles)")
    parser.add_argument("task_id", help="the task to play")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--script", type=Path, help="a JSON file of turns: [{calls: [{tool, args}], reply}]")
    group.add_argument("--reference", action="store_true", help="play the task's reference solution")
    parser.add_argument("--tool-timeout", type=float, default=60.0, help="seconds a tool call may take")
    parser.add_argument("--deploy-timeout", type=float, default=300.0, help="seconds the deploy may take")


def _read_script(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentEnvError(f"--script {path}: cannot be read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise AgentEnvError(
            f"--script {path}: not JSON ({exc.msg} at line {exc.lineno}); write a list of turns "
            '[{"calls": [{"tool": ..., "args": {...}}], "reply": ...}]'
        ) from None
    turns = data.get("turns") if isinstance(data, dict) else data
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise AgentEnvError(f"--script {path}: expected a list of turns, each {{calls: [...], reply: ...}}")
    return turns


def _own_tracebacks() -> None:
    """This command prints the env's traceback itself: the episode's error log would say it twice."""
    import logging

    logging.getLogger("agentenv.episode").addHandler(logging.NullHandler())


def run_play(args: argparse.Namespace) -> int:
    from agentenv.bundle import load_bundle  # here: `agentenv --help` loads no bundle machinery

    _own_tracebacks()
    bundle = load_bundle(args.bundle)
    try:
        task = bundle.task(args.task_id)
    except KeyError as exc:
        raise AgentEnvError(exc.args[0]) from None
    if args.reference:
        if task.solution is None:
            raise AgentEnvError(f"task {task.id!r} has no reference solution; give --script FILE or play it by hand")
        script: list[dict[str, Any]] | None = [t.model_dump() for t in task.solution]
    else:
        script = _read_script(args.script) if args.script else None

    from agentenv import interrupts

    result = interrupts.run(_play(bundle, task, script, args.tool_timeout, args.deploy_timeout))
    return 0 if result.outcome != "failed" else 1


async def _play(
    bundle: Any, task: Any, script: list[dict[str, Any]] | None, tool_timeout: float, deploy_timeout: float
) -> Any:
    from agentenv.cli.qa import scripted_turn
    from agentenv.engine.episode import Episode

    episode = Episode(bundle, task, tool_timeout=tool_timeout, deploy_timeout=deploy_timeout, purpose="play")
    await episode.start()
    try:
        print(f"task {task.id} ({task.split}), {len(task.turns)} turn(s)")
        if task.system:
            print(f"system: {task.system}")
        print("tools: " + ", ".join(t.name for t in episode.tools))
        turns = iter(script) if script is not None else None
        while episode.result is None:
            print(f"\n[turn {episode.turn + 1}] {episode.prompt}")
            step = await (scripted_turn(episode, next(turns, {}), print) if turns is not None else _typed_turn(episode))
            if step is None:
                break
    finally:
        result = await episode.close()
    print()
    _print_result(result)
    if result.outcome == "failed" and episode.traceback:
        print(f"\nthe env's traceback:\n{episode.traceback.rstrip()}")
    return result


async def _typed_turn(episode: Any) -> Any:
    import asyncio

    print("  type: call TOOL {json args} | reply TEXT | tools | quit")
    while True:
        try:
            line = (await asyncio.to_thread(input, "> ")).strip()
        except EOFError:
            return None
        verb, _, rest = line.partition(" ")
        if verb == "quit":
            return None
        if verb == "tools":
            for t in episode.tools:
                print(f"  {t.name}: {t.description}\n    {json.dumps(t.parameters)}")
        elif verb == "call":
            name, _, raw = rest.strip().partition(" ")
            try:
                call_args = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                print(f'  arguments are not JSON ({exc.msg}); e.g. call {name} {{"query": "budget"}}')
                continue
            step = await episode.call(name, call_args)
            if step.done:
                return step
            print(("  ! " if step.error else "  = ") + step.text.replace("\n", "\n    "))
        elif verb == "reply":
            return await episode.end_turn(rest)
        elif line:
            print(f"  unknown command {shlex.quote(verb)}")


def _print_result(result: Any) -> None:
    for step, score in result.scores.items():
        print(f"score {step}: {'no verdict' if score is None else f'{score:g}'}")
    if result.outcome == "scored":
        print(f"reward: {result.reward:g}")
    elif result.outcome == "failed":
        assert result.failure is not None
        print(f"failed ({result.failure.kind} during {result.failure.stage}): {result.failure.message}")
        print("reward: None (an env failure is never trained on)")
    else:
        print(f"unscored: {result.reason}")


# --- check -----------------------------------------------------------------------------------


def configure_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle's folder, or an installed bundle's name (agentenv bundles)")
    parser.add_argument("--deploy-timeout", type=float, default=300.0, help="seconds a deploy may take")
    parser.add_argument(
        "--strict", action="store_true", help="refuse what may be a mistake too (an unknown JSON Schema keyword)"
    )
    qa = parser.add_argument_group(
        "the QA gate",
        "with --qa, every task's reference must reach reward 1, twice alike, and replies that do no "
        "work must score 0 (a few episodes per task, so not by default; see docs/bundles.md#the-qa-gate)",
    )
    qa.add_argument("--qa", action="store_true", help="play the QA gate's episodes on every task (or those chosen)")
    qa.add_argument("--split", help="with --qa: only this split's tasks")
    qa.add_argument("--tasks", type=_names, default=[], help="with --qa: only these task ids, comma-separated")
    qa.add_argument("--concurrency", type=int, default=4, help="with --qa: episodes played at once (default 4)")
    qa.add_argument("--tool-timeout", type=float, default=60.0, help="with --qa: seconds a tool call may take")
    qa.add_argument("--out", type=Path, help="with --qa: also write the report as JSON to this file")


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run_check(args: argparse.Namespace) -> int:
    from agentenv.bundle import load_bundle  # here: `agentenv --help` loads no bundle machinery

    if not args.qa and (args.split or args.tasks or args.out):
        raise AgentEnvError("--split, --tasks and --out choose what the QA gate checks; add --qa")
    import logging

    logging.getLogger("agentenv.bundle").addHandler(logging.NullHandler())  # its warnings are printed below
    bundle = load_bundle(args.bundle, strict=args.strict)
    for warning in bundle.warnings:
        print(f"warning: {warning}")
    clean = (
        "loads cleanly" if not bundle.warnings else f"loads, with {len(bundle.warnings)} warning(s) (--strict refuses)"
    )
    print(f"bundle {bundle.name!r}: {len(bundle.tasks)} tasks in {', '.join(bundle.splits)}; {clean}")

    from agentenv import interrupts

    rows, failed = interrupts.run(_check(bundle, args.deploy_timeout))
    print(table(rows, ("toolset", "tasks", "played", "deploy s", "tools", "status")))
    if not args.qa:
        return 1 if failed else 0
    from agentenv.cli.qa import run_qa
    from agentenv.files import write_file

    _own_tracebacks()  # the findings name the file and line; --out keeps each traceback
    tasks = _chosen(bundle, args.split, args.tasks)
    report = run_qa(
        bundle, tasks, concurrency=args.concurrency, tool_timeout=args.tool_timeout, deploy_timeout=args.deploy_timeout
    )
    print(f"\nQA gate: {len(tasks)} task(s)")
    print(report.table())
    if args.out:
        write_file(args.out, report.json())
        print(f"report: {args.out}")
    return 1 if failed or not report.ok else 0


def _chosen(bundle: Any, split: str | None, ids: list[str]) -> list[Any]:
    """The tasks ``--split`` and ``--tasks`` choose (every task without them)."""
    if split and split not in bundle.splits:
        raise AgentEnvError(f"--split: no split {split!r}; the splits are {', '.join(bundle.splits)}")
    tasks = list(bundle.split(split) if split else bundle.tasks)
    if ids:
        unknown = [i for i in ids if i not in {t.id for t in tasks}]
        if unknown:
            where = f" in split {split!r}" if split else ""
            raise AgentEnvError(
                f"--tasks: no task {', '.join(map(repr, unknown))}{where}; list them: agentenv tasks {bundle.path}"
            )
        tasks = [t for t in tasks if t.id in ids]
    return tasks


async def _check(bundle: Any, deploy_timeout: float) -> tuple[list[tuple[Any, ...]], int]:
    from agentenv.engine.episode import Episode

    rows, failed = [], 0
    for key, tasks in bundle.by_toolset().items():
        episode = Episode(bundle, tasks[0], deploy_timeout=deploy_timeout, purpose="check")
        await episode.start()
        ok = await episode.ready()
        result = await episode.close()
        status = "ok" if ok else f"FAILED: {result.failure.message}"  # type: ignore[union-attr]
        failed += not ok
        names = ", ".join(t.name for t in episode.tools)
        rows.append((key, len(tasks), tasks[0].id, f"{result.seconds.deploy:.2f}", names, status))
    return rows, failed


# --- plugins ---------------------------------------------------------------------------------


def configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a plugin was left out (for a plugin's own CI)"
    )


def _agent_kind_rows(kinds: dict[str, Any]) -> list[tuple[str, ...]]:
    """A row per agent kind: the API it speaks, whether it takes the episode's tools, whether it runs here."""
    from pathlib import Path

    from agentenv.specs import AgentSpec

    rows = []
    for name, kind in sorted(kinds.items()):
        try:
            missing = kind.missing(AgentSpec(name=name, kind=name), Path.cwd())
        except Exception as exc:  # a plugin's check that breaks is shown, not raised
            missing = f"cannot tell: {type(exc).__name__}"
        rows.append((name, kind.dialect, "over MCP" if kind.mcp else "-", "ok" if missing is None else missing))
    return rows


def run_plugins(args: argparse.Namespace) -> int:
    from agentenv.plugins import plugins

    loaded = plugins()
    loaded.collect()  # every registration hook, so that every plugin to leave out is found
    rows = []
    for info in loaded.infos():
        hooks = [h.removeprefix("agentenv_") + (" (wrapper)" if h in info.wrappers else "") for h in info.hooks]
        rows.append((info.name, info.distribution, info.version, ", ".join(hooks)))
    print(table(rows, ("plugin", "distribution", "version", "hooks")))
    integrations = loaded.integrations()
    if integrations:
        out = []
        for name, integration in sorted(integrations.items()):
            version = integration.installed_version()
            try:
                verdict = "not installed" if version is None else (integration.check(version) and "ok")
            except ImportError:
                verdict = "OUTSIDE the supported range"
            out.append((name, integration.trainer, integration.supported, version or "-", verdict))
        print()
        print(table(out, ("integration", "trainer", "supported", "installed", "status")))
    kinds = loaded.agent_kinds()
    if kinds:
        print()
        print(table(_agent_kind_rows(kinds), ("agent kind", "speaks", "episode tools", "here")))
    if loaded.problems:
        print(f"\nleft out ({len(loaded.problems)}; everything else works):")
        for problem in loaded.problems:
            print(f"  {problem}")
    return 1 if args.check and loaded.problems else 0
