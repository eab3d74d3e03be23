"""``build_app``: a bundle served as an OpenEnv environment server.

The app is OpenEnv's own (``HTTPEnvServer`` routes on a FastAPI app): an episode is an OpenEnv
session on ``/ws``, the tasks are OpenEnv's Task API. agentenv adds, as ASGI middleware around it,
bearer-token auth, a message size limit, idle reaping, and teardown of every episode at shutdown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenv._openenv import import_openenv

import_openenv()  # before any openenv import: keeps OpenEnv's Gradio UI out of the server process

from agentenv.bundle import Bundle, Task, load_bundle
from agentenv.episode import Episode, RewardArg, Step
from agentenv.errors import AgentEnvError
from agentenv.wire import Code, Event, Op, coded
from fastapi import FastAPI, HTTPException
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

__all__ = ["DEFAULT_MAX_CONCURRENT_ENVS", "EpisodeAction", "EpisodeObservation", "build_app"]

log = logging.getLogger("agentenv.server")

DEFAULT_MAX_CONCURRENT_ENVS = 64
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_CONCURRENT_ENVS_VAR = "MAX_CONCURRENT_ENVS"


class EpisodeAction(Action):
    """A step of an episode: call a tool, end the turn, read the result, or finish now."""

    op: Literal["call", "end_turn", "result", "finish"]
    tool: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    reply: str = ""


class EpisodeObservation(Observation):
    """What the server answers: the start of an episode, a tool's answer, the next turn, or the result."""

    event: str
    episode_id: str = ""
    task_id: str = ""
    split: str = ""
    index: int = -1
    turn: int = 0
    turns: int = 0
    system: str = ""
    prompt: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    toolset_key: str = ""
    tool: str = ""
    text: str = ""
    error: bool = False
    deployed: bool = False
    result: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------
# Server-wide state shared by every session's env instance
# ---------------------------------------------------------------------------------------------


@dataclass
class _Served:
    bundle: Bundle
    tool_timeout: float
    reset_timeout: float
    reward: RewardArg
    live: set[BundleEnvironment] = field(default_factory=set)
    loop: asyncio.AbstractEventLoop | None = None
    episodes_started: int = 0


class BundleEnvironment(Environment[EpisodeAction, EpisodeObservation, State]):
    """One OpenEnv session: plays one episode of the bundle at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: _Served) -> None:
        super().__init__()
        self._served = served
        self._episode: Episode | None = None
        self._steps = 0  # a plain counter: OpenEnv's State validates every assignment

    # -- episodes ----------------------------------------------------------------------------

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **unknown: Any,
    ) -> EpisodeObservation:
        """Start a task (by ``task_id``, or ``split`` and ``index``); answers before the deploy ends."""
        del seed  # tasks are fixed; sampling is the trainer's business
        served = self._served
        served.loop = asyncio.get_running_loop()
        if unknown:
            raise ValueError(coded(Code.BAD_RESET, f"unknown reset field(s) {', '.join(sorted(unknown))}; "
                                   "send task_id, or split and index"))  # fmt: skip
        task = self._resolve(task_id, split, index)
        await self._end_episode()
        bundle = served.bundle
        episode = Episode(
            bundle,
            task,
            tool_timeout=served.tool_timeout,
            deploy_timeout=served.reset_timeout,
            reward=served.reward,
            episode_id=episode_id,
        )
        self._episode = episode
        served.live.add(self)
        served.episodes_started += 1
        self._steps = 0
        conn = _current_connection.get()
        if conn is not None:
            conn.env = self
        await episode.start()
        return EpisodeObservation(
            event=Event.STARTED,
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
            done=episode.result is not None,
            result=episode.result.as_dict() if episode.result is not None else None,
        )

    def _resolve(self, task_id: str | None, split: str | None, index: int | None) -> Task:
        bundle = self._served.bundle
        if task_id is not None:
            if split is not None or index is not None:
                raise ValueError(coded(Code.BAD_RESET, "send task_id, or split and index, not both"))
            try:
                return bundle.task(task_id)
            except KeyError:
                raise ValueError(coded(Code.UNKNOWN_TASK, f"bundle {bundle.name!r} has no task {task_id!r}; read "
                                       "the task ids from the Task API (POST /<bundle>/tasks)")) from None  # fmt: skip
        if split is None or index is None:
            raise ValueError(coded(Code.BAD_RESET, "reset needs task_id, or split and index"))
        if split not in bundle.splits:
            raise ValueError(coded(Code.UNKNOWN_SPLIT, _unknown_split(bundle, split)))
        tasks = bundle.split(split)
        if not isinstance(index, int) or not 0 <= index < len(tasks):
            raise ValueError(coded(Code.UNKNOWN_TASK, f"split {split!r} has {len(tasks)} tasks; index {index!r} is "
                                   f"not in 0..{len(tasks) - 1}"))  # fmt: skip
        return tasks[index]

    async def step_async(
        self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        """Run one episode action."""
        episode = self._episode
        if episode is None:
            raise RuntimeError(coded(Code.NO_EPISODE, "no episode is running: send a reset first (task_id, or "
                                     "split and index)"))  # fmt: skip
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
            return EpisodeObservation(
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
        return EpisodeObservation(
            event=event,
            episode_id=episode.episode_id,
            task_id=episode.task.id,
            turn=episode.turn + 1,
            turns=len(episode.task.turns),
            tool=tool,
            prompt=step.text if event == Event.TURN else "",
            text=step.text if event == Event.TOOL else "",
            error=step.error,
            deployed=episode.deployed,
        )

    async def _end_episode(self) -> None:
        episode, self._episode = self._episode, None
        self._served.live.discard(self)
        if episode is not None:
            await episode.close()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (reset_async)")

    def step(self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any) -> EpisodeObservation:
        raise NotImplementedError("agentenv episodes run on the event loop (step_async)")

    @property
    def state(self) -> State:
        episode_id = self._episode.episode_id if self._episode is not None else None
        return State(episode_id=episode_id, step_count=self._steps)

    def close(self) -> None:
        """Tear the running episode down (OpenEnv calls this when the session ends)."""
        loop = self._served.loop
        if self._episode is None:
            return
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # called on the loop itself: schedule, don't block it
            loop.create_task(self._end_episode())
            return
        future = asyncio.run_coroutine_threadsafe(self._end_episode(), loop)
        try:
            future.result(timeout=self._served.reset_timeout + 30)
        except concurrent.futures.TimeoutError:
            log.error("teardown of episode %s took too long", self.state.episode_id)

    def get_metadata(self) -> EnvironmentMetadata:
        bundle = self._served.bundle
        from agentenv import __version__

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
        return [
            {"name": s, "type": _split_type(s), "num_tasks": len(bundle.split(s))}
            for s in bundle.splits
        ]  # fmt: skip

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` has."""
        return len(self._split(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task of ``split`` with its first prompt and toolset."""
        return [self._row(t, i) for i, t in enumerate(self._split(split))]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """One task of ``split``."""
        tasks = self._split(split)
        if not 0 <= index < len(tasks):
            raise IndexError(index)
        return self._row(tasks[index], index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` of ``split``."""
        tasks = self._split(split)
        begin = start or 0
        return [self._row(t, begin + i) for i, t in enumerate(tasks[begin:stop])]

    def _split(self, split: str) -> list[Task]:
        bundle = self._served.bundle
        if split not in bundle.splits:
            raise HTTPException(status_code=404, detail={"message": _unknown_split(bundle, split),
                                                         "splits": bundle.splits})  # fmt: skip
        return bundle.split(split)

    def _row(self, task: Task, index: int) -> dict[str, Any]:
        bundle = self._served.bundle
        toolset = bundle.toolset(task)
        access = {n: {"deny": toolset.deny.get(n, []), "allow": toolset.allow.get(n, [])} for n in toolset.envs}
        return {
            "id": task.id,
            "split": task.split,
            "index": index,
            "system": task.system,
            "prompt": task.turns[0].prompt,
            "turns": len(task.turns),
            "steps": list(task.step_ids),
            "toolset_key": bundle.toolset_key(task),
            "toolset": {"envs": list(toolset.envs), "role": toolset.role, "access": access, "bash": toolset.bash},
        }


def _split_type(split: str) -> str:
    return split if split in {"train", "validation", "test"} else ("validation" if split == "eval" else "train")


def _unknown_split(bundle: Bundle, split: str) -> str:
    return f"bundle {bundle.name!r} has no split {split!r}; its splits: {', '.join(bundle.splits)}"


# ---------------------------------------------------------------------------------------------
# OpenEnv's server, with capacity errors that say what to change
# ---------------------------------------------------------------------------------------------


class _AgentEnvHTTPServer(HTTPEnvServer):
    async def _create_session(self) -> tuple[str, Environment]:
        try:
            return await super()._create_session()
        except SessionCapacityError as exc:
            raise SessionCapacityError(
                exc.active_sessions,
                exc.max_sessions,
                f"server at capacity: {exc.active_sessions}/{exc.max_sessions} sessions active. Wait for a session "
                f"to end, or start the server with more: max_concurrent_envs= (build_app) or --max-concurrent-envs "
                f"(agentenv serve) or the {MAX_CONCURRENT_ENVS_VAR} environment variable",
            ) from None


# ---------------------------------------------------------------------------------------------
# ASGI middleware: token, size limit, idle reaping
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Connection:
    send: Callable[[Mapping[str, Any]], Any]
    last_activity: float
    busy: bool = False
    closed: bool = False
    env: BundleEnvironment | None = None


_current_connection: contextvars.ContextVar[_Connection | None] = contextvars.ContextVar(
    "agentenv_connection", default=None
)


@dataclass(eq=False)
class _GuardState:
    token: bytes | None
    max_message_bytes: int
    idle_timeout: float | None
    connections: set[_Connection] = field(default_factory=set)
    reaper: asyncio.Task[None] | None = None


class _Guard:
    """Token check for every request but ``GET /health``; size limit and idle reaping for ``/ws``.

    Pure ASGI middleware (added with ``app.add_middleware``) so it sees WebSocket frames, which
    HTTP middleware cannot.
    """

    def __init__(self, app: Any, *, state: _GuardState) -> None:
        self.app = app
        self.state = state
        self.token = state.token
        self.max_message_bytes = state.max_message_bytes
        self.idle_timeout = state.idle_timeout
        self.connections = state.connections

    def _authorized(self, scope: Mapping[str, Any]) -> bool:
        if self.token is None:
            return True
        if scope["type"] == "http" and scope["path"] == "/health" and scope.get("method") in ("GET", "HEAD"):
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            return await self.app(scope, receive, send)
        if not self._authorized(scope):
            return await _refuse(scope, receive, send)
        if kind != "websocket":
            return await self.app(scope, receive, send)
        if self.state.reaper is None and self.idle_timeout is not None:
            self.state.reaper = asyncio.get_running_loop().create_task(self._reap())
        conn = _Connection(send=send, last_activity=time.monotonic())
        self.connections.add(conn)
        limit = self.max_message_bytes

        async def guarded_receive() -> Mapping[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                conn.last_activity = time.monotonic()
                payload = message.get("text")
                size = len(payload.encode()) if payload is not None else len(message.get("bytes") or b"")
                if size > limit:
                    await send({"type": "websocket.send", "text": _error_frame(
                        Code.TOO_LARGE, f"message of {size} bytes is over the server's limit of {limit} bytes "
                        "(build_app(max_message_bytes=...)); it was dropped and the session goes on")})  # fmt: skip
                    continue
                conn.busy = True
                return message

        async def guarded_send(message: Mapping[str, Any]) -> None:
            if conn.closed:
                return  # the reaper closed this socket; the app's late close is moot
            if message["type"] == "websocket.send":
                conn.busy = False
                conn.last_activity = time.monotonic()
            await send(message)

        token = _current_connection.set(conn)
        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            _current_connection.reset(token)
            self.connections.discard(conn)

    async def _reap(self) -> None:
        assert self.idle_timeout is not None
        interval = max(min(self.idle_timeout / 4, 5.0), 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.closed or conn.busy or now - conn.last_activity <= self.idle_timeout:
                    continue
                conn.closed = True
                log.info("closing a session idle for %.0f s", now - conn.last_activity)
                try:
                    await conn.send({"type": "websocket.send", "text": _error_frame(
                        Code.IDLE, f"session idle for more than {self.idle_timeout:g} s (idle_timeout); its episode "
                        "was torn down. Open a new session to play again")})  # fmt: skip
                    await conn.send({"type": "websocket.close", "code": 1001, "reason": "idle"})
                except Exception:  # the socket may already be gone; it is being closed either way
                    pass


def _error_frame(code: str, message: str) -> str:
    return json.dumps({"type": "error", "data": {"message": coded(code, message), "code": "SESSION_ERROR"}})


async def _refuse(scope: Mapping[str, Any], receive: Any, send: Any) -> None:
    body = json.dumps({"detail": "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token "
                                 "the server was started with"}).encode()  # fmt: skip
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    # a WebSocket is refused before it opens: no session is created
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


# ---------------------------------------------------------------------------------------------


def build_app(
    bundle: Bundle | str | Path,
    *,
    token: str | None = None,
    max_concurrent_envs: int | None = None,
    reward: RewardArg = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    idle_timeout: float | None = 900.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> FastAPI:
    """Serve ``bundle`` as an OpenEnv environment server (a FastAPI app; run it with uvicorn).

    ``token``: every request but ``GET /health`` needs ``Authorization: Bearer <token>``.
    ``max_concurrent_envs``: sessions at once (default: ``$MAX_CONCURRENT_ENVS``, else 64).
    ``reward``: a reward rule (name or callable over the scores) for every task, instead of each
    task's own. ``tool_timeout`` / ``reset_timeout``: deadlines of a tool call and of a deploy.
    ``idle_timeout``: seconds without a message before a session is closed and its episode torn down.
    """
    if not isinstance(bundle, Bundle):
        bundle = load_bundle(bundle)
    if reward is not None and not callable(reward):
        from agentenv.bundle import RewardSpec
        from agentenv.plugins import plugins

        spec = RewardSpec(rule=reward) if isinstance(reward, str) else reward
        plugins().reward_rule(spec.rule)  # an unknown rule fails here, naming the known ones
        for task in bundle.tasks:
            problems = plugins().reward_rule(spec.rule).check(spec.params, task.step_ids)
            if problems:
                raise AgentEnvError(f"reward={reward!r} does not fit task {task.id!r}: {'; '.join(problems)}")
    capacity = _capacity(max_concurrent_envs)
    served = _Served(bundle=bundle, tool_timeout=tool_timeout, reset_timeout=reset_timeout, reward=reward)
    app = FastAPI(title=f"agentenv: {bundle.name}", description=bundle.description)
    server = _AgentEnvHTTPServer(
        env=functools.partial(BundleEnvironment, served),
        action_cls=EpisodeAction,
        observation_cls=EpisodeObservation,
        max_concurrent_envs=capacity,
        env_name=bundle.name,
    )
    server.register_routes(app)

    async def teardown_all() -> None:
        """On shutdown (SIGTERM), end every episode still running before the process exits."""
        live = list(served.live)
        if live:
            log.info("tearing down %d running episode(s)", len(live))
        await asyncio.gather(*(env._end_episode() for env in live), return_exceptions=True)
        if guard.reaper is not None:
            guard.reaper.cancel()
            guard.reaper = None

    app.router.on_shutdown.insert(0, teardown_all)
    guard = _GuardState(token=token.encode() if token else None, max_message_bytes=max_message_bytes,
                        idle_timeout=idle_timeout)  # fmt: skip
    app.add_middleware(_Guard, state=guard)
    app.state.agentenv = served
    app.state.openenv = server
    app.state.max_message_bytes = max_message_bytes
    app.state.guard = guard
    return app


def _capacity(max_concurrent_envs: int | None) -> int:
    if max_concurrent_envs is not None:
        if max_concurrent_envs < 1:
            raise AgentEnvError(f"max_concurrent_envs={max_concurrent_envs}: it must be at least 1")
        return max_concurrent_envs
    raw = os.environ.get(MAX_CONCURRENT_ENVS_VAR)
    if raw is None or raw == "":
        return DEFAULT_MAX_CONCURRENT_ENVS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise AgentEnvError(f"{MAX_CONCURRENT_ENVS_VAR}={raw!r}: set it to a whole number of sessions, at least 1")
    return value
