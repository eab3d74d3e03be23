"""Where a harness rollout's episode is played: in this process (``agentenv.Episode``, the code the server
runs) or on an agentenv server (``agentenv.Rollout``). Either way the reward comes from the task's own
verifiers and reward rule, and an env or server failure raises ``EpisodeLost`` carrying its ``Failure``.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentenv.bundle import Bundle, Task
from agentenv.client import Shared
from agentenv.engine import Episode, Step
from agentenv.errors import EpisodeLost
from agentenv.record import Recorder
from agentenv.wire import Attempt, EpisodeResult, Tool

__all__ = ["EpisodeHandle", "LocalEpisode", "RemoteEpisode"]


class EpisodeHandle(Protocol):
    """One episode of a task, as a harness rollout plays it."""

    tools: list[Tool]

    async def start(self) -> None:
        """Start the episode and wait for its deploy; ``EpisodeLost`` when it failed."""

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        """Run a tool: its answer and whether it is an error (the policy's mistake); ``EpisodeLost`` when lost."""

    async def end_turn(self, reply: str) -> str | None:
        """End the open turn: the next prompt, or None when the episode is over; ``EpisodeLost`` when lost."""

    async def close(self) -> EpisodeResult:
        """Tear the episode down (idempotent) and return its result."""


def _lost(step: Step) -> EpisodeLost:
    result = step.result
    assert result is not None and result.failure is not None
    return EpisodeLost(f"task {result.task_id!r}: {result.failure.message}", failure=result.failure)


class LocalEpisode:
    """The episode in this process: ``agentenv.Episode``, the code ``agentenv serve`` runs."""

    def __init__(
        self,
        bundle: Bundle,
        task: Task,
        *,
        tool_timeout: float,
        deploy_timeout: float,
        episode_id: str,
        recorder: Recorder | None = None,
    ):
        attempt = Attempt(rollout=episode_id, client="agentenv run") if recorder is not None else None
        self.episode = Episode(
            bundle,
            task,
            tool_timeout=tool_timeout,
            deploy_timeout=deploy_timeout,
            episode_id=episode_id,
            attempt=attempt,
            on_end=recorder.episode_ended if recorder is not None else None,
        )
        self.tools: list[Tool] = []

    async def start(self) -> None:
        await self.episode.start()
        ready = await self.episode.ready()
        self.tools = list(self.episode.tools)
        result = self.episode.result
        if not ready and result is not None and result.failure is not None:
            raise EpisodeLost(f"task {result.task_id!r}: {result.failure.message}", failure=result.failure)

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        step = await self.episode.call(tool, args)
        if step.done:
            if step.result is not None and step.result.outcome == "failed":
                raise _lost(step)
            return "error: the episode is over; the tool was not called", True
        return step.text, step.error

    async def end_turn(self, reply: str) -> str | None:
        step = await self.episode.end_turn(reply)
        if step.done:
            if step.result is not None and step.result.outcome == "failed":
                raise _lost(step)
            return None
        return step.text

    async def close(self) -> EpisodeResult:
        return await self.episode.close()


class RemoteEpisode:
    """The episode on an agentenv server (``agentenv serve``), through the session layer.

    With ``waits_for_server`` the start waits out a server that is restarting, unreachable or full (within
    ``reset_timeout``), and says so once per server.
    """

    def __init__(self, shared: Shared, task_id: str) -> None:
        from agentenv.client import Session

        self.session = Session(shared)
        self.rollout = self.session.rollout(task_id)
        self.tools: list[Tool] = []
        self._result: EpisodeResult | None = None

    async def start(self) -> None:
        started = await self.rollout.start()
        self.tools = list(started.tools)

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        answer = await self.rollout.call(tool, args)
        return answer.text, answer.error

    async def end_turn(self, reply: str) -> str | None:
        answer = await self.rollout.end_turn(reply)
        return None if answer.done else answer.prompt

    async def close(self) -> EpisodeResult:
        if self._result is not None:
            return self._result
        try:
            result = self.rollout.result
            if result is None and self.rollout.started is not None:
                result = await self.session.finish()  # ended early: torn down now, unscored
        except EpisodeLost as exc:
            result = EpisodeResult(task_id=self.rollout.task_id, outcome="failed", failure=exc.failure, reason=str(exc))
        finally:
            await self.session.close()
        if result is None:  # it never started: lost at its start, or closed first
            failures = self.rollout.record.failures
            if failures:
                result = EpisodeResult(
                    task_id=self.rollout.task_id, outcome="failed", failure=failures[-1], reason=failures[-1].message
                )
            else:
                result = EpisodeResult(
                    task_id=self.rollout.task_id, outcome="unscored", reason="closed before its episode started"
                )
        self._result = result
        return result
