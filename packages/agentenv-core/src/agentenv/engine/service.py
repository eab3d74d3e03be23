"""The play protocol over a loaded bundle, free of any transport: what a reset and a step do, and the answers.

``Service`` holds what every session of a bundle shares (deadlines, reward rule, tool threads); a ``Player`` is one
session: ``reset`` starts a task, ``step`` plays it, ``end_episode`` tears it down. Each returns the fields of an
``agentenv.wire.Observation`` (only those set). The server (agentenv-server) wraps them in OpenEnv's classes and sends
them over ``/ws``; ``agentenv.local`` hands them to a client in the same process. A request that cannot be played (an
unknown task, a step with no episode) is answered with an ``error`` observation naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentenv import wire
from agentenv.bundle import Bundle, Task
from agentenv.engine.deployment import Deployment
from agentenv.engine.episode import Episode, Step
from agentenv.engine.scoring import RewardArg
from agentenv.engine.threads import ToolThreads
from agentenv.wire import Code, Event, Op, Problem, TaskRow, ToolsetInfo

__all__ = ["Player", "Service", "task_row", "unknown_split"]

Fields = dict[str, Any]


@dataclass
class Service:
    """What every session of ``bundle`` shares. ``on_end`` hears of every episode that ends (its record, counts)."""

    bundle: Bundle
    tool_timeout: float
    reset_timeout: float
    reward: RewardArg
    threads: ToolThreads
    max_message_bytes: int = 0
    on_end: Callable[[Episode, wire.EpisodeResult], None] | None = None
    episodes_started: int = 0  # every episode a reset started (plays, probes and checks)

    def episode_ended(self, episode: Episode, result: wire.EpisodeResult) -> None:
        """An episode is over (``on_end``)."""
        if self.on_end is not None:
            self.on_end(episode, result)

    def deployment(self, toolset_key: str) -> Deployment | None:
        """A deployment of ``toolset_key`` kept ready for a rollout to take, or None (none kept here)."""
        del toolset_key
        return None

    def player(self, on_episode: Callable[[Episode], None] | None = None) -> Player:
        """A session's player; ``on_episode`` is called with each episode it creates, before it starts."""
        return Player(self, on_episode)

    def info(self, version: str, max_concurrent_envs: int = 0) -> Fields:
        """What ``GET /agentenv`` answers (``agentenv.wire.ServerInfo``): the protocol, the bundle and the limits."""
        bundle = self.bundle
        return wire.ServerInfo(
            protocol=wire.PROTOCOL,
            name=bundle.name,
            description=bundle.description,
            version=version,
            splits={s: len(bundle.split(s)) for s in bundle.splits},
            max_message_bytes=self.max_message_bytes,
            max_concurrent_envs=max_concurrent_envs,
            tool_timeout=self.tool_timeout,
            reset_timeout=self.reset_timeout,
        ).model_dump()

    def splits(self) -> list[dict[str, Any]]:
        """The Task API's splits, each with its task count."""
        bundle = self.bundle
        return [{"name": s, "type": _split_type(s), "num_tasks": len(bundle.split(s))} for s in bundle.splits]

    def task_range(self, split: str, start: int = 0, stop: int | None = None) -> list[Fields]:
        """Tasks ``start`` to ``stop`` of ``split`` as Task API rows; ``KeyError`` (naming the splits) for another."""
        if split not in self.bundle.splits:
            raise KeyError(unknown_split(self.bundle, split))
        tasks = self.bundle.split(split)
        return [task_row(self.bundle, t, start + i) for i, t in enumerate(tasks[start:stop])]


def _error(code: str, message: str) -> Fields:
    return {"event": Event.ERROR, "problem": Problem(code=code, message=message)}


class Player:
    """One session of a ``Service``: one episode at a time."""

    def __init__(self, service: Service, on_episode: Callable[[Episode], None] | None = None) -> None:
        self.service = service
        self.episode: Episode | None = None
        self.steps = 0
        self._ending: Episode | None = None  # the last episode ended, whose teardown may still run
        self._on_episode = on_episode

    @property
    def playing(self) -> bool:
        """Whether an episode is running (started and not torn down)."""
        return self.episode is not None and not self.episode.closed

    async def reset(
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
    ) -> Fields:
        """Start a task (by ``task_id``, or ``split`` and ``index``); answers before the deploy ends."""
        del seed  # tasks are fixed; sampling is the trainer's business
        refused = _refused_reset(protocol, unknown, purpose)
        if refused is not None:
            return refused
        try:
            tag = wire.read(wire.Attempt, attempt, "the reset's attempt") if attempt is not None else None
        except wire.WireError as exc:
            return _error(Code.BAD_RESET, str(exc))
        task = self._resolve(task_id, split, index)
        if isinstance(task, dict):
            return task
        await self.end_episode()
        service, bundle = self.service, self.service.bundle
        key = bundle.toolset_key(task)
        episode = Episode(
            bundle,
            task,
            tool_timeout=service.tool_timeout,
            deploy_timeout=service.reset_timeout,
            reward=service.reward,
            episode_id=episode_id,
            purpose=purpose,  # type: ignore[arg-type]
            threads=service.threads,
            attempt=tag,
            on_end=service.episode_ended,
            deployment=service.deployment(key) if purpose == "play" else None,  # a probe lists tools: no deploy
        )
        self.episode = episode
        self.steps = 0
        service.episodes_started += 1
        if self._on_episode is not None:
            self._on_episode(episode)
        await episode.start()
        result = episode.result
        return {
            "event": Event.STARTED,
            "protocol": wire.PROTOCOL,
            "episode_id": episode.episode_id,
            "task_id": task.id,
            "split": task.split,
            "index": bundle.index_of(task),
            "turn": 1,
            "turns": len(task.turns),
            "system": task.system,
            "prompt": task.turns[0].prompt,
            "tools": [t.as_dict() for t in episode.tools],
            "toolset_key": key,
            "deployed": episode.deployed,
            "max_message_bytes": service.max_message_bytes,
            "done": result is not None,
            "result": result.as_dict() if result is not None else None,
        }

    def _resolve(self, task_id: str | None, split: str | None, index: int | None) -> Task | Fields:
        bundle = self.service.bundle
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

    async def step(self, action: wire.ActionFields) -> Fields:
        """Run one step of the episode: a tool call, the end of a turn, its result, or its end now."""
        episode = self.episode
        if episode is None:
            return _error(Code.NO_EPISODE, "no episode is running: send a reset first (task_id, or split and index)")
        self.steps += 1
        if action.op == Op.CALL:
            step = await episode.call(action.tool, action.args)
            return _answer(episode, step, Event.TOOL, tool=action.tool)
        if action.op == Op.END_TURN:
            step = await episode.end_turn(action.reply)
            return _answer(episode, step, Event.TURN)
        if action.op == Op.FINISH:
            await episode.close()
        return _answer(episode, Step(done=episode.result is not None, result=episode.result), Event.RESULT)

    def abandon(self, kind: str, message: str) -> None:
        """Fail the running episode as ``kind`` (a row of the fault table): its client went, the player stops."""
        if self.episode is not None:
            self.episode.abandon(kind, message)

    async def end_episode(self) -> None:
        """Tear the running episode down; returns once it is torn down, also when a teardown begun elsewhere is still
        running."""
        episode = self.episode or self._ending
        self.episode, self._ending = None, episode
        if episode is not None:
            await episode.close()  # once per episode: a second caller waits for the same teardown


def _refused_reset(protocol: int | None, unknown: dict[str, Any], purpose: str) -> Fields | None:
    """The error answer of a reset that cannot start anything, or None."""
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
    return None


def _answer(episode: Episode, step: Step, event: str, *, tool: str = "") -> Fields:
    result = step.result
    task = episode.task
    if step.done and result is not None:
        return {
            "event": Event.RESULT,
            "episode_id": episode.episode_id,
            "task_id": task.id,
            "turn": min(episode.turn + 1, len(task.turns)),
            "turns": len(task.turns),
            "tool": tool,
            "deployed": episode.deployed,
            "result": result.as_dict(),
            "done": True,
            "reward": result.reward,
        }
    if event == Event.TURN:
        fields: Fields = {"prompt": step.text}
    else:
        fields = {"tool": tool, "text": step.text, "error": step.error}
    return {
        "event": event,
        "episode_id": episode.episode_id,
        "task_id": task.id,
        "turn": episode.turn + 1,
        "turns": len(task.turns),
        "deployed": episode.deployed,
        **fields,
    }


def task_row(bundle: Bundle, task: Task, index: int) -> Fields:
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
