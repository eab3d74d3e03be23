"""The QA gate (``agentenv check --qa``): do a bundle's rewards mean something?

For each task, episodes are played in this process from scripts (no model):

- **reference**: the task's reference solution must reach the maximum reward (1);
- **again**: played a second time, it must score the same, step by step (within the task's ``qa.tolerance``);
- **floor**: replies that do no work must score at the floor (0, within ``qa.tolerance``, or no verdict): an
  empty reply, a reply with no tool call (``Done.``), the turn's prompt said back, and the task's ``qa.stubs``;
  each is every turn's reply, with no tool call. (A regex verifier's pattern is no stub: as text, ``(?i)saturday``
  is the answer itself.)

An episode that fails (the env's fault) in any of these is a finding too: a policy's empty reply that crashes a
verifier is an episode never trained on. ``qa_bundle`` is the public face (``agentenv check --qa`` prints its
report; other tools read ``QAReport.as_dict()``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenv import interrupts
from agentenv.bundle import Bundle, Task
from agentenv.engine.episode import Episode
from agentenv.text import table
from agentenv.wire import EpisodeResult

__all__ = ["MAX_REWARD", "NO_TOOL_CALL", "Probe", "QAReport", "TaskQA", "qa_bundle", "run_qa", "scripted_turn"]

MAX_REWARD = 1.0
NO_TOOL_CALL = "Done."  # what a policy that skips the work says
_EPS = 1e-9

Say = Callable[[str], None]


@dataclass(frozen=True)
class Probe:
    """One scripted episode the gate played: its name (``reference``, ``again``, ``empty``, ``done``, ``echo``,
    ``stub 'TEXT'``), the replies
    it gave, its result, and the tool calls the env answered with an error."""

    name: str
    replies: tuple[str, ...]
    result: EpisodeResult
    errors: tuple[str, ...] = ()
    traceback: str | None = None  # the env's, when an exception of its code failed the episode

    @property
    def reward(self) -> float | None:
        """The reward when scored, else None."""
        return self.result.reward if self.result.outcome == "scored" else None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        failure = self.result.failure
        return {
            "name": self.name,
            "replies": list(self.replies),
            "outcome": self.result.outcome,
            "reward": self.result.reward,
            "scores": dict(self.result.scores),
            "failure": None
            if failure is None
            else {"kind": failure.kind, "stage": failure.stage, "message": failure.message},
            "reason": self.result.reason,
            "tool_errors": list(self.errors),
            "traceback": self.traceback,
        }


@dataclass(frozen=True)
class TaskQA:
    """The gate's verdict on one task (read from ``file``): the probes played and every finding, each
    ``FIELD: what happened; the fix`` (none when it passes)."""

    task_id: str
    split: str
    file: str
    probes: tuple[Probe, ...]
    findings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the task passed every check."""
        return not self.findings

    def probe(self, name: str) -> Probe | None:
        """The probe called ``name``, if it was played."""
        return next((p for p in self.probes if p.name == name), None)

    def row(self) -> tuple[Any, ...]:
        """Its line of the table: task, split, reference, again, floor (the highest a stub scored), status."""
        ref, again = self.probe("reference"), self.probe("again")
        stubs = [p for p in self.probes if p.name not in ("reference", "again")]
        rewards = [p.reward for p in stubs if p.reward is not None]
        status = "ok" if self.ok else f"FAIL ({len(self.findings)})"
        floor = _shown(max(rewards)) if rewards else ("-" if not stubs else "no verdict")
        return (self.task_id, self.split, _cell(ref), _cell(again), floor, status)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "task": self.task_id,
            "split": self.split,
            "ok": self.ok,
            "findings": list(self.findings),
            "probes": [p.as_dict() for p in self.probes],
        }


@dataclass(frozen=True)
class QAReport:
    """The gate's verdict on a bundle: a ``TaskQA`` per task checked."""

    bundle: str
    tasks: tuple[TaskQA, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Whether every task passed."""
        return all(t.ok for t in self.tasks)

    @property
    def failed(self) -> list[TaskQA]:
        """The tasks that did not pass."""
        return [t for t in self.tasks if not t.ok]

    def table(self) -> str:
        """The table a person reads, then each failing task's findings, one a line."""
        text = table([t.row() for t in self.tasks], ("task", "split", "reference", "again", "floor", "status"))
        lines = [f"{t.file}: task {t.task_id}: {finding}" for t in self.failed for finding in t.findings]
        verdict = (
            f"{len(self.tasks)} task(s) passed the QA gate"
            if self.ok
            else f"{len(self.failed)} of {len(self.tasks)} task(s) failed the QA gate: "
            + ", ".join(t.task_id for t in self.failed)
        )
        return "\n".join([text, "", *lines, *([""] if lines else []), verdict])

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``agentenv check --qa --out FILE`` writes it)."""
        return {
            "bundle": self.bundle,
            "ok": self.ok,
            "failed": [t.task_id for t in self.failed],
            "tasks": [t.as_dict() for t in self.tasks],
        }

    def json(self) -> str:
        """``as_dict()`` as JSON text."""
        return json.dumps(self.as_dict(), indent=2, ensure_ascii=False) + "\n"


def _shown(value: float) -> str:
    return f"{value:.3g}"


def _cell(probe: Probe | None) -> str:
    if probe is None:
        return "-"
    if probe.result.outcome == "scored":
        return _shown(probe.result.reward or 0.0)
    return probe.result.outcome


async def scripted_turn(episode: Episode, turn: Mapping[str, Any], say: Say | None = None) -> Any:
    """Play one scripted turn (``{calls: [{tool, args}], reply}``) on ``episode``; ``say`` is told each step.

    Returns the end of turn's ``Step`` (or a call's, when the episode ended during it).
    """
    for call in turn.get("calls") or []:
        tool, call_args = call.get("tool"), call.get("args") or {}
        if say:
            say(f"  call {tool} {json.dumps(call_args)}")
        step = await episode.call(tool, call_args)
        if step.done:
            return step
        if say:
            say(("  ! " if step.error else "  = ") + step.text.replace("\n", "\n    "))
    reply = str(turn.get("reply", ""))
    if say:
        say(f"  reply: {reply}")
    return await episode.end_turn(reply)


async def _play(bundle: Bundle, task: Task, name: str, script: Sequence[Mapping[str, Any]], **options: Any) -> Probe:
    episode = Episode(bundle, task, purpose="check", **options)
    await episode.start()
    try:
        for turn in script:
            if (await scripted_turn(episode, turn)).done:
                break
    finally:
        result = await episode.close()
    errors = tuple(f"{c.tool} {json.dumps(dict(c.args))} -> {c.answer}" for c in episode.calls if c.error)
    return Probe(name, tuple(str(t.get("reply", "")) for t in script), result, errors, episode.traceback)


def _stubs(task: Task) -> list[tuple[str, list[str]]]:
    """The replies that do no work, by name: each a reply per turn."""
    turns = task.turns
    stubs = [
        ("empty", [""] * len(turns)),
        ("done", [NO_TOOL_CALL] * len(turns)),
        ("echo", [t.prompt for t in turns]),  # the turn's prompt said back
    ]
    stubs += [(f"stub {text!r}", [text] * len(turns)) for text in task.qa.stubs]
    return stubs


async def qa_task(bundle: Bundle, task: Task, limit: asyncio.Semaphore | None = None, **options: Any) -> TaskQA:
    """Play the gate's probes of ``task`` (``options`` go to each ``Episode``: ``tool_timeout``...)."""
    limit = limit or asyncio.Semaphore(1)

    async def play(name: str, script: Sequence[Mapping[str, Any]]) -> Probe:
        async with limit:
            return await _play(bundle, task, name, script, **options)

    plays = []
    if task.solution is not None:
        reference = [t.model_dump() for t in task.solution]
        plays += [play("reference", reference), play("again", reference)]
    plays += [play(name, [{"calls": [], "reply": r} for r in replies]) for name, replies in _stubs(task)]
    probes = tuple(await asyncio.gather(*plays))
    return TaskQA(task.id, task.split, bundle.source(task), probes, tuple(_findings(task, probes)))


def _findings(task: Task, probes: Sequence[Probe]) -> Iterable[str]:
    """Each finding as ``FIELD: what happened; the fix``."""
    by_name = {p.name: p for p in probes}
    ref, again = by_name.get("reference"), by_name.get("again")
    if ref is None:
        yield (
            "solution: none, so nothing shows that the maximum reward can be reached; add a reference solution "
            "(solution: a turn per turn, each its calls and reply)"
        )
    else:
        yield from _reference_findings(task, ref)
        if again is not None:
            yield from _determinism_findings(task, ref, again)
    for probe in probes:
        if probe.name not in ("reference", "again"):
            yield from _floor_findings(task, probe)


def _floor_findings(task: Task, probe: Probe) -> Iterable[str]:
    shown = f"{probe.name}: {_replies(probe.replies)}, no tool call"
    failure = probe.result.failure
    if failure is not None:
        yield (
            f"{_failed_field(task, failure.message)}: a reply that does no work ({shown}) made the episode fail "
            f"({failure.kind} during {failure.stage}: {failure.message}); a policy's reply must be scored (0), "
            "never crash the env or a verifier"
        )
    elif probe.reward is not None and probe.reward > task.qa.tolerance + _EPS:
        high = [k for k, v in probe.result.scores.items() if v and v > task.qa.tolerance + _EPS]
        fields = ", ".join(f"{_step_field(task, k)} ({k} {_shown(probe.result.scores[k] or 0)})" for k in high)
        yield (
            f"{fields}: a reply that does no work ({shown}) scored {_shown(probe.reward)}; it must score 0: make "
            "the verifier check the answer or the env's state, not that a reply was given"
        )


def _step_field(task: Task, step: str) -> str:
    """The field of the verifier with step id ``step`` (``turns[0].verifiers[1]``)."""
    for t, turn in enumerate(task.turns):
        for v, spec in enumerate(turn.verifiers):
            if spec.id == step:
                return f"turns[{t}].verifiers[{v}]"
    return "reward"


def _failed_field(task: Task, message: str) -> str:
    """The field a failure's message names: a verifier's (``verifier 'x'``), else the toolset (its envs)."""
    step = next((s for s in task.step_ids if f"verifier {s!r}" in message), None)
    return _step_field(task, step) if step is not None else "toolset"


def _replies(replies: Sequence[str]) -> str:
    unique = list(dict.fromkeys(replies))
    text = ", ".join(repr(r if len(r) <= 60 else r[:57] + "...") for r in unique)
    return f"reply {text}" if len(unique) == 1 else f"replies {text}"


def _reference_findings(task: Task, ref: Probe) -> Iterable[str]:
    result = ref.result
    errors = f"; its calls answered with an error: {'; '.join(ref.errors)}" if ref.errors else ""
    if result.failure is not None:
        failure = result.failure
        field = _failed_field(task, failure.message) if failure.stage == "scoring" else "solution"
        what = f"{failure.kind} during {failure.stage}"
        yield f"{field}: the reference solution failed ({what}): {failure.message}{errors}"
    elif result.outcome == "unscored":
        yield f"solution: the reference solution was not scored ({result.reason}){errors}"
    elif (result.reward or 0.0) < MAX_REWARD - _EPS:
        low = ", ".join(f"{k} {_shown(v)}" for k, v in result.scores.items() if v is not None and v < MAX_REWARD)
        yield (
            f"solution: the reference solution scored {_shown(result.reward or 0.0)}, not {MAX_REWARD:g} (step {low})"
            f"{errors}; fix the solution's calls or replies, or the verifier"
        )


def _determinism_findings(task: Task, ref: Probe, again: Probe) -> Iterable[str]:
    a, b = ref.result, again.result
    if a.outcome != b.outcome:
        yield (
            f"solution: the reference solution ended {a.outcome} once and {b.outcome} the next time "
            f"({a.reason or '-'} / {b.reason or '-'}): the env or a verifier is not deterministic"
        )
        return
    tolerance = task.qa.tolerance
    for step in dict.fromkeys([*a.scores, *b.scores]):
        x, y = a.scores.get(step), b.scores.get(step)
        if (x is None) != (y is None) or (x is not None and y is not None and abs(x - y) > tolerance + _EPS):
            yield (
                f"{_step_field(task, step)} ({step}): scored {x} then {y} on two plays of the reference solution, "
                f"more apart than qa.tolerance ({tolerance:g}); make the verifier deterministic, or for a judged "
                "task declare how far it may vary (qa: {tolerance: 0.1})"
            )


async def qa_bundle(
    bundle: Bundle,
    tasks: Iterable[Task] | None = None,
    *,
    concurrency: int = 4,
    tool_timeout: float = 60.0,
    deploy_timeout: float = 300.0,
) -> QAReport:
    """Run the QA gate on ``tasks`` of ``bundle`` (every task when not given), ``concurrency`` episodes at once."""
    limit = asyncio.Semaphore(max(1, concurrency))
    options = {"tool_timeout": tool_timeout, "deploy_timeout": deploy_timeout}
    chosen = list(bundle.tasks if tasks is None else tasks)
    checked = await asyncio.gather(*(qa_task(bundle, task, limit, **options) for task in chosen))
    return QAReport(bundle.name, tuple(checked))


def run_qa(bundle: Bundle, tasks: Iterable[Task] | None = None, **options: Any) -> QAReport:
    """``qa_bundle`` from synchronous code (it runs its own event loop)."""
    return interrupts.run(qa_bundle(bundle, tasks, **options))
