"""``BundleEnvironment``: one OpenEnv session of a served bundle, playing one episode at a time.

What a reset and a step do is the engine's (``agentenv.engine.Service``, the code ``agentenv.local`` plays in
process); this module gives it OpenEnv's classes, with the fields of ``agentenv.wire`` (one definition for both
sides), and the server's bookkeeping: the sessions alive at shutdown, the metrics, the records.
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
from agentenv.engine import Deployment, Episode, Service, unknown_split
from agentenv.record import Recorder
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


@dataclass
class Served(Service):
    """Server-wide state every session's environment shares: the engine's service and the server's own."""

    live: set[BundleEnvironment] = field(default_factory=set)
    loop: asyncio.AbstractEventLoop | None = None
    recorder: Recorder | None = None  # every played episode's record (agentenv serve --record)
    metrics: Metrics = field(default_factory=Metrics)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    ahead: Ahead | None = None  # deployments kept ready (build_app's warm=)

    def episode_ended(self, episode: Episode, result: wire.EpisodeResult) -> None:
        """An episode of this server is over: counted, and its record written (``--record``)."""
        self.metrics.episode_ended(episode, result)
        if self.recorder is not None:
            self.recorder.episode_ended(episode, result)

    def deployment(self, toolset_key: str) -> Deployment | None:
        """A deployment kept ready for ``toolset_key`` (``warm``), or None."""
        return self.ahead.take(toolset_key) if self.ahead is not None else None

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task on the running loop, holding on to it until it is done."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


class BundleEnvironment(Environment[EpisodeAction, EpisodeObservation, State]):
    """One OpenEnv session: plays one episode of the bundle at a time (``agentenv.engine.Player``)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    # OpenEnv gives each session a thread of its own to create and close its env in, unless the env asks for one
    # thread shared by every session. This env's work runs on the event loop (and sync tools on the server's
    # bounded pool): one shared thread, so sessions cost no thread each.
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, served: Served) -> None:
        super().__init__()
        self._served = served
        self._player = served.player(self._began)

    @property
    def _episode(self) -> Episode | None:
        return self._player.episode

    def _began(self, episode: Episode) -> None:
        """An episode of this session is about to start: counted, and known to shutdown and the guard."""
        served = self._served
        served.live.add(self)
        served.metrics.episode_started(episode.purpose)
        conn = current_connection.get()
        if conn is not None:
            conn.env = self

    # -- episodes ----------------------------------------------------------------------------

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **fields: Any
    ) -> EpisodeObservation:
        """Start a task (by ``task_id``, or ``split`` and ``index``); answers before the deploy ends."""
        self._served.loop = asyncio.get_running_loop()
        return EpisodeObservation(**await self._player.reset(seed, episode_id, **fields))

    async def step_async(
        self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        """Run one episode action."""
        answer = await self._player.step(action)
        if not self._player.playing:
            self._served.live.discard(self)
        return EpisodeObservation(**answer)

    def abandon(self, kind: str, message: str) -> None:
        """Fail the running episode as ``kind`` (a row of the fault table): its client went, the server stops."""
        self._player.abandon(kind, message)

    async def end_episode(self) -> None:
        """Tear the running episode down (at the end of the session, at shutdown, when the client goes); returns
        once it is torn down, also when a teardown begun elsewhere is still running."""
        try:
            await self._player.end_episode()
        finally:
            if not self._player.playing:
                self._served.live.discard(self)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (reset_async)")

    def step(self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (step_async)")

    @property
    def state(self) -> State:
        episode_id = self._episode.episode_id if self._episode is not None else None
        return State(episode_id=episode_id, step_count=self._player.steps)

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
        return self._served.splits()

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` has."""
        self._rows(split, 0, 0)  # a 404 naming the splits for an unknown one
        return len(self._served.bundle.split(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task of ``split`` with its first prompt and toolset (``agentenv.wire.TaskRow``)."""
        return self._rows(split)

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """One task of ``split``."""
        rows = self._rows(split, index, index + 1) if index >= 0 else []
        if not rows:
            raise IndexError(index)
        return rows[0]

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` of ``split`` (a page of them)."""
        return self._rows(split, start or 0, stop)

    def _rows(self, split: str, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        from fastapi import HTTPException

        try:
            return self._served.task_range(split, start, stop)
        except KeyError:
            bundle = self._served.bundle
            raise HTTPException(
                status_code=404, detail={"message": unknown_split(bundle, split), "splits": bundle.splits}
            ) from None
