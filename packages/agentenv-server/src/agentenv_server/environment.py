"""``BundleEnvironment``: one OpenEnv session of a served bundle, playing one episode at a time.

Its action and observation classes are OpenEnv's, with the fields of ``agentenv.wire`` (one definition
for both sides). A request the server refuses (an unknown task, a step with no episode) is answered with
an ``error`` observation naming the fix, and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._openenv import import_openenv

import_openenv()  # before any openenv import: keeps OpenEnv's Gradio UI out of the server process

from agentenv import wire
from agentenv.bundle import Bundle, Task
from agentenv.engine import Episode, RewardArg, Step, ToolThreads
from agentenv.record import Recorder
from agentenv.wire import Code, Event, Op, Problem, TaskRow, ToolsetInfo
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State

from .guard import current_connection
from .metrics import Metrics

if TYPE_CHECKING:
    from .ahead import Ahead

__all__ = ["BundleEnvironment", "EpisodeAction", "EpisodeObservation", "Served"]

log = logging.getLogger("agentenv.server")


class EpisodeAction(wire.ActionFields, Action):
    """A step of an episode (``agentenv.wire.Action``) as OpenEnv's action class."""


class EpisodeObservation(wire.ObservationFields, Observation):
    """An answer (``agentenv.wire.Observation``) as OpenEnv's observation class.

    An answer carries only the fields it sets: a tool's answer is a few fields, not every field of every
    event (the client's model fills in the defaults), so every call serializes and sends less.
    """

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("exclude_unset", True)
        return super().model_dump(**kwargs)


def answer(**fields: Any) -> EpisodeObservation:
    """An observation of the fields given (only those are sent)."""
    return EpisodeObservation(**fields)


@dataclass
class Served:
    """Server-wide state every session's environment shares."""

    bundle: Bundle
    tool_timeout: float
    reset_timeout: float
    reward: RewardArg
    threads: ToolThreads
    max_message_bytes: int = 0
    live: set[BundleEnvironment] = field(default_factory=set)
    loop: asyncio.AbstractEventLoop | None = None
    episodes_started: int = 0
    recorder: Recorder | None = None  # every played episode's record (agentenv serve --record)
    metrics: Metrics = field(default_factory=Metrics)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    ahead: Ahead | None = None  # deployments kept ready (build_app's warm=)

    def episode_ended(self, episode: Episode, result: wire.EpisodeResult) -> None:
        """An episode of this server is over: counted, and its record written (``--record``)."""
        self.metrics.episode_ended(episode, result)
        if self.recorder is not None:
            self.recorder.episode_ended(episode, result)

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task on the running loop, holding on to it until it is done."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def _error(code: str, message: str) -> EpisodeObservation:
    return answer(event=Event.ERROR, problem=Problem(code=code, message=message))


class BundleEnvironment(Environment[EpisodeAction, EpisodeObservation, State]):
    """One OpenEnv session: plays one episode of the bundle at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    # OpenEnv gives each session a thread of its own to create and close its env in, unless the env asks for one
    # thread shared by every session. This env's work runs on the event loop (and sync tools on the server's
    # bounded pool): one shared thread, so sessions cost no thread each.
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, served: Served) -> None:
        super().__init__()
        self._served = served
        self._episode: Episode | None = None
        self._ending: Episode | None = None  # the last episode ended, whose teardown may still run
        self._steps = 0  # a plain counter: OpenEnv's State validates every assignment

    # -- episodes ----------------------------------------------------------------------------

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        purpose: str = "play",
        protocol: int | None = None,
        attempt: dict[str, Any] | None = None,
        **unknown: Any,
    ) -> EpisodeObservation:
        """Start a task (by ``task_id``, or ``split`` and ``index``); answers before the deploy ends."""
        del seed  # tasks are fixed; sampling is the trainer's business
        served = self._served
        served.loop = asyncio.get_running_loop()
        if protocol != wire.PROTOCOL:
            said = "no protocol version (agentenv-core before 0.2)" if protocol is None else f"protocol {protocol}"
            return _error(
                Code.BAD_RESET,
                f"the client speaks {said}; this server speaks agentenv protocol {wire.PROTOCOL}: upgrade the "
                "client's agentenv-core (or this server) so they match",
            )
        if unknown:
            return _error(
                Code.BAD_RESET, f"unknown reset field(s) {', '.join(sorted(unknown))}; send task_id, or split and index"
            )
        if purpose not in ("play", "probe", "check"):
            return _error(Code.BAD_RESET, f"purpose {purpose!r} is not one of play, probe, check")
        try:
            tag = wire.read(wire.Attempt, attempt, "the reset's attempt") if attempt is not None else None
        except wire.WireError as exc:
            return _error(Code.BAD_RESET, str(exc))
        task = self._resolve(task_id, split, index)
        if isinstance(task, EpisodeObservation):
            return task
        await self.end_episode()
        bundle = served.bundle
        ahead = served.ahead if purpose == "play" else None  # a probe lists tools: it deploys nothing
        episode = Episode(
            bundle,
            task,
            tool_timeout=served.tool_timeout,
            deploy_timeout=served.reset_timeout,
            reward=served.reward,
            episode_id=episode_id,
            purpose=purpose,  # type: ignore[arg-type]
            threads=served.threads,
            attempt=tag,
            on_end=served.episode_ended,
            deployment=ahead.take(bundle.toolset_key(task)) if ahead is not None else None,
        )
        self._episode = episode
        served.live.add(self)
        served.episodes_started += 1
        served.metrics.episode_started(purpose)
        self._steps = 0
        conn = current_connection.get()
        if conn is not None:
            conn.env = self
        await episode.start()
        return answer(
            event=Event.STARTED,
            protocol=wire.PROTOCOL,
            episode_id=episode.episode_id,
            task_id=task.id,
            split=task.split,
            index=bundle.index_of(task),
            turn=1,
            turns=len(task.turns),
            system=task.system,
            prompt=task.turns[0].prompt,
            tools=[t.as_dict() for t in episode.tools],
            toolset_key=bundle.toolset_key(task),
            deployed=episode.deployed,
            max_message_bytes=served.max_message_bytes,
            done=episode.result is not None,
            result=episode.result.as_dict() if episode.result is not None else None,
        )

    def _resolve(self, task_id: str | None, split: str | None, index: int | None) -> Task | EpisodeObservation:
        bundle = self._served.bundle
        if task_id is not None:
            if split is not None or index is not None:
                return _error(Code.BAD_RESET, "send task_id, or split and index, not both")
            try:
                return bundle.task(task_id)
            except KeyError:
                return _error(
                    Code.UNKNOWN_TASK,
                    f"bundle {bundle.name!r} has no task {task_id!r}; read the task ids "
                    "from the Task API (agentenv.client.taskapi.read_tasks)",
                )
        if split is None or index is None:
            return _error(Code.BAD_RESET, "reset needs task_id, or split and index")
        if split not in bundle.splits:
            return _error(Code.UNKNOWN_SPLIT, unknown_split(bundle, split))
        tasks = bundle.split(split)
        if not isinstance(index, int) or not 0 <= index < len(tasks):
            return _error(
                Code.UNKNOWN_TASK,
                f"split {split!r} has {len(tasks)} tasks; index {index!r} is not in 0..{len(tasks) - 1}",
            )
        return tasks[index]

    async def step_async(
        self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        """Run one episode action."""
        episode = self._episode
        if episode is None:
            return _error(Code.NO_EPISODE, "no episode is running: send a reset first (task_id, or split and index)")
        self._steps += 1
        if action.op == Op.CALL:
            step = await episode.call(action.tool, action.args)
            return self._answer(episode, step, Event.TOOL, tool=action.tool)
        if action.op == Op.END_TURN:
            step = await episode.end_turn(action.reply)
            return self._answer(episode, step, Event.TURN)
        if action.op == Op.FINISH:
            await episode.close()
        return self._answer(episode, Step(done=episode.result is not None, result=episode.result), Event.RESULT)

    def _answer(self, episode: Episode, step: Step, event: str, *, tool: str = "") -> EpisodeObservation:
        result = step.result
        if step.done and result is not None:
            if episode.closed:
                self._served.live.discard(self)
            return answer(
                event=Event.RESULT,
                episode_id=episode.episode_id,
                task_id=episode.task.id,
                turn=min(episode.turn + 1, len(episode.task.turns)),
                turns=len(episode.task.turns),
                tool=tool,
                deployed=episode.deployed,
                result=result.as_dict(),
                done=True,
                reward=result.reward,
            )
        if event == Event.TURN:
            fields: dict[str, Any] = {"prompt": step.text}
        else:
            fields = {"tool": tool, "text": step.text, "error": step.error}
        return answer(
            event=event,
            episode_id=episode.episode_id,
            task_id=episode.task.id,
            turn=episode.turn + 1,
            turns=len(episode.task.turns),
            deployed=episode.deployed,
            **fields,
        )

    def abandon(self, kind: str, message: str) -> None:
        """Fail the running episode as ``kind`` (a row of the fault table): its client went, the server stops."""
        if self._episode is not None:
            self._episode.abandon(kind, message)

    async def end_episode(self) -> None:
        """Tear the running episode down (at the end of the session, at shutdown, when the client goes); returns
        once it is torn down, also when a teardown begun elsewhere is still running."""
        episode = self._episode or self._ending
        self._episode, self._ending = None, episode
        if episode is None:
            return
        try:
            await episode.close()  # once per episode: a second caller waits for the same teardown
        finally:
            if self._episode is None:
                self._served.live.discard(self)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (reset_async)")

    def step(self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (step_async)")

    @property
    def state(self) -> State:
        episode_id = self._episode.episode_id if self._episode is not None else None
        return State(episode_id=episode_id, step_count=self._steps)

    def close(self) -> None:
        """Tear the running episode down (OpenEnv calls this when the session ends, on its one shared thread).

        Hands the teardown to the event loop and returns at once (teardowns run side by side); the guard
        keeps the session's slot until the teardown is done.
        """
        loop = self._served.loop
        if self._episode is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._served.in_background(self.end_episode())
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing is left to tear down
                loop.call_soon_threadsafe(lambda: self._served.in_background(self.end_episode()))

    def get_metadata(self) -> EnvironmentMetadata:
        bundle = self._served.bundle
        from ._version import __version__

        return EnvironmentMetadata(
            name=bundle.name,
            description=bundle.description or f"agentenv bundle {bundle.name}",
            version=__version__,
            author=None,
            documentation_url=None,
            readme_content=None,
        )

    # -- OpenEnv Task API ----------------------------------------------------------------------

    def list_splits(self) -> list[dict[str, Any]]:
        """The splits, each with its task count."""
        bundle = self._served.bundle
        return [{"name": s, "type": _split_type(s), "num_tasks": len(bundle.split(s))} for s in bundle.splits]

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` has."""
        return len(self._split(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task of ``split`` with its first prompt and toolset (``agentenv.wire.TaskRow``)."""
        return [task_row(self._served.bundle, t, i) for i, t in enumerate(self._split(split))]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """One task of ``split``."""
        tasks = self._split(split)
        if not 0 <= index < len(tasks):
            raise IndexError(index)
        return task_row(self._served.bundle, tasks[index], index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` of ``split`` (a page of them)."""
        tasks = self._split(split)
        begin = start or 0
        return [task_row(self._served.bundle, t, begin + i) for i, t in enumerate(tasks[begin:stop])]

    def _split(self, split: str) -> list[Task]:
        from fastapi import HTTPException

        bundle = self._served.bundle
        if split not in bundle.splits:
            raise HTTPException(
                status_code=404, detail={"message": unknown_split(bundle, split), "splits": bundle.splits}
            )
        return bundle.split(split)


def task_row(bundle: Bundle, task: Task, index: int) -> dict[str, Any]:
    """The Task API row of ``task`` (``agentenv.wire.TaskRow``, as JSON)."""
    toolset = bundle.toolset(task)
    access = {n: {"deny": toolset.deny.get(n, []), "allow": toolset.allow.get(n, [])} for n in toolset.envs}
    return TaskRow(
        id=task.id,
        split=task.split,
        index=index,
        system=task.system,
        prompt=task.turns[0].prompt,
        turns=len(task.turns),
        steps=list(task.step_ids),
        toolset_key=bundle.toolset_key(task),
        toolset=ToolsetInfo(envs=list(toolset.envs), role=toolset.role, access=access, bash=toolset.bash),
    ).model_dump()


def _split_type(split: str) -> str:
    return split if split in {"train", "validation", "test"} else ("validation" if split == "eval" else "train")


def unknown_split(bundle: Bundle, split: str) -> str:
    """The message for a split the bundle lacks, naming those it has."""
    return f"bundle {bundle.name!r} has no split {split!r}; its splits: {', '.join(bundle.splits)}"
