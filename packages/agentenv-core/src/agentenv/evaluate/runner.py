"""A run of ``agentenv eval``: every task of the splits played ``samples`` times by the model, ``concurrency`` at a
time, each finished sample written to ``DIR/results.jsonl`` at once, then ``DIR/summary.json``.

The bundle is reached through the session layer whether it is served elsewhere (a URL) or is a folder
here: a folder is played in this process (``agentenv.local``), through the same sessions, so both take the
same client path. Each worker holds one session and plays its samples one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from agentenv import interrupts
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import AgentEnvError
from agentenv.evaluate.chat import ChatClient, Endpoint, EndpointError
from agentenv.evaluate.loop import play_sample
from agentenv.evaluate.progress import Progress
from agentenv.evaluate.results import RESULTS, RUN, SUMMARY, ResultsFile, Sample, write_json
from agentenv.evaluate.summary import Summary, summarize
from agentenv.files import locked
from agentenv.local import played_here
from agentenv.wire import TaskRow

__all__ = ["EvalConfig", "evaluate", "run_eval"]

log = logging.getLogger("agentenv.evaluate")

# settings a resumed run must share with the run it continues (each with the flag that sets it)
_KEPT = {
    "bundle": "BUNDLE_OR_URL",
    "splits": "--split",
    "model": "--model",
    "temperature": "--temperature",
    "max_turns": "--max-turns",
    "max_tokens": "--max-tokens",
    "threshold": "--pass-threshold",
}


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate and how (the flags of ``agentenv eval``).

    ``target``: a bundle (folder or installed name; served here) or a server URL (``token_var`` names the variable
    holding its token). ``splits``: the splits to play. ``samples``: plays per task. ``concurrency``:
    samples at once. ``max_turns``: completions per task turn. ``attempts``: episodes per sample when the
    env or server loses one. ``out``: the results folder (default ``evals/<bundle>-<model>``). ``resume``:
    continue the results there. ``tasks``: only these task ids; ``limit``: only the first tasks of each
    split. ``ks``: the k of each pass@k (default 1 and ``samples``). ``threshold``: the reward that passes.
    ``record``: a folder for the record of every episode (``agentenv.record``), for a bundle folder served here (a
    server at a URL keeps its own: ``agentenv serve --record``).
    """

    target: str
    endpoint: Endpoint
    splits: Sequence[str] = ("eval",)
    samples: int = 1
    concurrency: int = 8
    max_turns: int = 10
    attempts: int = 3
    out: Path | None = None
    resume: bool = False
    token_var: str | None = None
    tasks: Sequence[str] = ()
    limit: int | None = None
    ks: Sequence[int] | None = None
    threshold: float = 1.0
    tool_timeout: float = 60.0
    reset_timeout: float = 300.0
    record: Path | None = None

    def __post_init__(self) -> None:
        for name, flag in (
            ("samples", "-n"),
            ("concurrency", "--concurrency"),
            ("max_turns", "--max-turns"),
            ("attempts", "--attempts"),
        ):
            if int(getattr(self, name)) < 1:
                raise AgentEnvError(f"{flag} {getattr(self, name)}: give 1 or more")
        if self.limit is not None and self.limit < 1:
            raise AgentEnvError(f"--limit {self.limit}: give 1 or more")
        if self.ks is not None and any(int(k) < 1 for k in self.ks):
            raise AgentEnvError(f"--pass-k {','.join(map(str, self.ks))}: every k is 1 or more")

    @property
    def pass_ks(self) -> list[int]:
        """The k of each pass@k."""
        return sorted({int(k) for k in self.ks} if self.ks else {1, self.samples})

    def settings(self, bundle: str) -> dict[str, Any]:
        """The run's settings, as ``run.json`` and ``summary.json`` keep them."""
        e = self.endpoint
        return {
            "bundle": bundle,
            "target": self.target,
            "splits": list(self.splits),
            "model": e.model,
            "llm_url": e.url,
            "samples": self.samples,
            "temperature": e.temperature,
            "max_turns": self.max_turns,
            "max_tokens": e.max_tokens,
            "attempts": self.attempts,
            "threshold": self.threshold,
            "tasks": list(self.tasks) or None,
            "limit": self.limit,
        }


def is_url(target: str) -> bool:
    """Whether ``target`` is a server's URL rather than a bundle folder."""
    return bool(re.match(r"^(https?|wss?)://", target))


@contextlib.asynccontextmanager
async def served(config: EvalConfig) -> AsyncIterator[Shared]:
    """Where to play: ``config.target`` itself (its token from ``--token-var``), or the bundle folder (or installed
    bundle) played in this process for the run (``agentenv.local``: no server, no port)."""
    timeouts = {"tool_timeout": config.tool_timeout, "reset_timeout": config.reset_timeout}
    if is_url(config.target):
        if config.record is not None:
            raise AgentEnvError(
                f"--record {config.record}: a server at a URL records its own episodes; start it with agentenv serve "
                "BUNDLE --record DIR, or evaluate the bundle folder here with --record"
            )
        yield Shared(config.target, token_var=config.token_var, client="eval", **timeouts)
        return
    if config.token_var:
        raise AgentEnvError(
            "--token-var is for a served bundle (a URL); a bundle folder is played in this process "
            "without a token: drop --token-var"
        )
    fix = "give a server URL (http://host:port), a bundle folder or an installed bundle's name as BUNDLE_OR_URL"
    async with played_here(config.target, fix, record=config.record, **timeouts) as here:
        yield here.shared(client="eval")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def _rows(shared: Shared, config: EvalConfig) -> tuple[str, list[TaskRow], int]:
    from agentenv.client.taskapi import iter_tasks, probe

    info = probe(shared)
    rows: list[TaskRow] = []
    for split in config.splits:
        found = list(iter_tasks(shared, split, info=info))
        if config.tasks:
            found = [r for r in found if r.id in config.tasks]
        rows += found[: config.limit]
    missing = [t for t in config.tasks if t not in {r.id for r in rows}]
    if missing:
        raise AgentEnvError(
            f"--tasks: no task {', '.join(map(repr, missing))} in split(s) "
            f"{', '.join(config.splits)} of {info.name}; see agentenv tasks BUNDLE"
        )
    if not rows:
        raise AgentEnvError(
            f"split(s) {', '.join(config.splits)} of {info.name} have no tasks; pick others with --split"
        )
    return info.name, rows, info.max_concurrent_envs


def _prepare(out: Path, config: EvalConfig, settings: dict[str, Any]) -> dict[tuple[str, int], Sample]:
    """The samples a resumed run already has (none for a new run); refuses to mix runs."""
    results = out / RESULTS
    if not config.resume:
        if results.exists() and results.stat().st_size > 0:
            raise AgentEnvError(
                f"{results} holds samples of an earlier run: pass --resume to continue it, or a new --out DIR"
            )
        write_json(out / RUN, settings)
        return {}
    if (out / RUN).exists():
        before = json.loads((out / RUN).read_text(encoding="utf-8"))
        for key, flag in _KEPT.items():
            if before.get(key) != settings.get(key):
                raise AgentEnvError(
                    f"--resume: {out} was run with {flag} {before.get(key)!r}, not {settings.get(key)!r};"
                    " give the same, or a new --out DIR"
                )
    write_json(out / RUN, settings)
    return ResultsFile(results).read()


async def evaluate(config: EvalConfig, *, stream: TextIO | None = None) -> Summary:
    """Run the evaluation ``config`` describes; returns the summary (also written to ``DIR/summary.json``).

    Progress goes to ``stream`` (default stderr). An endpoint error other than a context too long stops
    the run (the samples finished so far are kept; ``resume=True`` continues).
    """
    began = time.monotonic()
    async with served(config) as shared:
        bundle, rows, capacity = await asyncio.to_thread(_rows, shared, config)
        settings = config.settings(bundle)
        out = config.out or Path("evals") / f"{_slug(bundle)}-{_slug(config.endpoint.model)}"
        with locked(out, "--out"):  # a second run on this folder would append to the same results
            return await _run(config, shared, rows, capacity, settings, out, began, stream)


async def _run(
    config: EvalConfig,
    shared: Shared,
    rows: list[TaskRow],
    capacity: int,
    settings: dict[str, Any],
    out: Path,
    began: float,
    stream: TextIO | None,
) -> Summary:
    """Play what ``out`` lacks of the run, appending each sample; write the summary however it ends."""
    have = _prepare(out, config, settings)
    plan = [(row, i) for i in range(config.samples) for row in rows]
    keys = {(row.id, i) for row, i in plan}
    latest = {key: s for key, s in have.items() if key in keys}
    todo = deque((row, i) for row, i in plan if (s := latest.get((row.id, i))) is None or s.outcome == "failed")
    workers = min(config.concurrency, len(todo))
    if capacity and workers > capacity:
        log.warning(
            "--concurrency %d is more than %s holds at once (max_concurrent_envs=%d); playing %d at once",
            workers,
            shared.url,
            capacity,
            capacity,
        )
        workers = capacity
    progress = Progress(len(plan), done=len(plan) - len(todo), stream=stream)
    results = ResultsFile(out / RESULTS)
    client = ChatClient(config.endpoint, connections=workers)
    complete = False
    try:
        if todo:
            await client.check()
            progress.start()
            played = dataclasses.replace(shared, waits_for_server=True)  # a busy server is waited out, not lost
            await _play_all(played, client, todo, workers, config, results, latest, progress)
            progress.close()
        complete = True
    except EndpointError as exc:
        done = sum(1 for s in latest.values() if s.outcome != "failed")
        if not done:
            raise
        raise EndpointError(
            f"{exc} ({done} of {len(plan)} samples are finished in {out / RESULTS}: once it is "
            "fixed, --resume plays the rest)",
            kind=exc.kind,
        ) from None
    finally:
        results.close()
        await client.aclose()
        run = {**settings, "out": str(out), "complete": complete, "wall_seconds": round(time.monotonic() - began, 3)}
        summary = summarize(latest.values(), ks=config.pass_ks, threshold=config.threshold, run=run)
        summary.write(out / SUMMARY)
    return summary


async def _play_all(
    shared: Shared,
    client: ChatClient,
    todo: deque[tuple[TaskRow, int]],
    workers: int,
    config: EvalConfig,
    results: ResultsFile,
    latest: dict[tuple[str, int], Sample],
    progress: Progress,
) -> None:
    async def worker() -> None:
        session = Session(shared)
        try:
            while todo:
                row, index = todo.popleft()
                sample = await play_sample(
                    session,
                    client,
                    row,
                    index,
                    attempts=config.attempts,
                    max_turns=config.max_turns,
                    threshold=config.threshold,
                )
                results.append(sample)
                latest[sample.key] = sample
                progress.update(sample)
        finally:
            await session.close()

    tasks = [asyncio.create_task(worker(), name=f"agentenv-eval-{n}") for n in range(workers)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


def run_eval(config: EvalConfig, *, stream: TextIO | None = None) -> Summary:
    """``evaluate`` for synchronous callers (the CLI, a script)."""
    return interrupts.run(evaluate(config, stream=stream))
