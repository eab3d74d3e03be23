"""``build_app``: a bundle served as an OpenEnv environment server.

The app is OpenEnv's own (``HTTPEnvServer`` routes on a FastAPI app): an episode is an OpenEnv
session on ``/ws`` (``environment.BundleEnvironment``), the tasks are OpenEnv's Task API, and
``GET /agentenv`` answers ``agentenv.wire.ServerInfo`` (the protocol version, splits and limits).
agentenv adds, as ASGI middleware (``guard``), bearer-token auth, admission (capacity and file
descriptors), frame checks, idle reaping and cancellation of abandoned calls; and teardown of every
episode at shutdown (``close_sessions``; ``runner.Server`` bounds it by a grace period).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from pathlib import Path

from ._openenv import import_openenv

import_openenv()  # before any openenv import: keeps OpenEnv's Gradio UI out of the server process

from agentenv import wire
from agentenv.bundle import Bundle, load_bundle
from agentenv.episode import RewardArg
from agentenv.errors import AgentEnvError
from agentenv.threads import ToolThreads, pool_size
from fastapi import FastAPI, Response
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment

from .environment import BundleEnvironment, EpisodeAction, EpisodeObservation, Served
from .guard import Guard, GuardState
from .limits import FdBudget, QuietAcceptErrors, fds_per_session

__all__ = [
    "DEFAULT_MAX_CONCURRENT_ENVS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "EpisodeAction",
    "EpisodeObservation",
    "build_app",
    "close_sessions",
]

log = logging.getLogger("agentenv.server")

DEFAULT_MAX_CONCURRENT_ENVS = 64
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # larger frames get MESSAGE_TOO_LARGE; the session goes on
MIN_FRAME_BYTES = 16 * 1024 * 1024  # larger frames end the connection (close code 1009): see max_frame_bytes
MAX_CONCURRENT_ENVS_VAR = "MAX_CONCURRENT_ENVS"


class _AgentEnvHTTPServer(HTTPEnvServer):
    """OpenEnv's server, with a capacity error that says what to change (a backstop: the guard admits first)."""

    # what to change when the server is full; a host with replicas says more
    capacity_fix = (
        f"start the server with more: max_concurrent_envs= (build_app) or --max-concurrent-envs (agentenv serve) "
        f"or the {MAX_CONCURRENT_ENVS_VAR} environment variable"
    )

    # what to change when the server is full; agentenv_server.ray's replicas say more (replicas)
    capacity_fix = (
        f"start the server with more: max_concurrent_envs= (build_app) or --max-concurrent-envs (agentenv serve) "
        f"or the {MAX_CONCURRENT_ENVS_VAR} environment variable"
    )

    async def _create_session(self) -> tuple[str, Environment]:
        try:
            return await super()._create_session()
        except SessionCapacityError as exc:
            raise SessionCapacityError(
                exc.active_sessions,
                exc.max_sessions,
                f"server at capacity: {exc.active_sessions}/{exc.max_sessions} sessions active. Wait for a session "
                f"to end, or {self.capacity_fix}",
            ) from None


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
    max_frame_bytes: int | None = None,
    tool_threads: int | None = None,
) -> FastAPI:
    """Serve ``bundle`` as an OpenEnv environment server (a FastAPI app; run it with uvicorn).

    ``token``: every request but ``GET /health`` needs ``Authorization: Bearer <token>``.
    ``max_concurrent_envs``: sessions at once (default: ``$MAX_CONCURRENT_ENVS``, else 64).
    ``reward``: a reward rule (name or callable over the scores) for every task, instead of each
    task's own. ``tool_timeout`` / ``reset_timeout``: deadlines of a tool call and of a deploy.
    ``idle_timeout``: seconds without a message before a session is closed and its episode torn down.
    ``max_message_bytes``: a larger frame is answered ``MESSAGE_TOO_LARGE`` and the session goes on.
    ``max_frame_bytes``: a larger frame is not read: the connection ends with close code 1009 (default: the
    larger of 16 MiB and 4 x ``max_message_bytes``; uvicorn's ``ws_max_size``).
    ``tool_threads``: the pool that runs sync tools, deploys, teardowns and verifiers (default:
    ``$AGENTENV_TOOL_THREADS``, else 32); async envs run on the event loop.

    The soft limit on open files is raised to the hard limit, and the sessions are capped to what it
    leaves room for (``app.state.capacity_note`` says how many and why).
    """
    if not isinstance(bundle, Bundle):
        bundle = load_bundle(bundle)
    if reward is not None and not callable(reward):
        from agentenv.bundle import RewardSpec
        from agentenv.plugins import plugins

        spec = RewardSpec(rule=reward) if isinstance(reward, str) else reward
        plugins().reward_rule(spec.rule)  # an unknown rule fails here, naming the known ones
        for task in bundle.tasks:
            problems = list(plugins().reward_rule(spec.rule).check(spec.params, task.step_ids))
            if problems:
                raise AgentEnvError(f"reward={reward!r} does not fit task {task.id!r}: {'; '.join(map(str, problems))}")
    requested = _capacity(max_concurrent_envs)
    fds = FdBudget.at_start(fds_per_session(bundle))
    capacity = fds.sessions(requested)
    note = fds.describe(capacity)
    if capacity < requested:
        need = requested * fds.per_session
        note = (f"max_concurrent_envs={requested} needs about {need} file descriptors, more than "
                f"the limit of {fds.limit} leaves room for: serving at most {capacity} sessions. Raise the limit "
                "(ulimit -n, systemd LimitNOFILE=) or lower --max-concurrent-envs")  # fmt: skip
        log.warning("%s", note)
    QuietAcceptErrors.install()
    _warm(bundle)
    served = Served(bundle=bundle, tool_timeout=tool_timeout, reset_timeout=reset_timeout, reward=reward,
                    threads=ToolThreads(pool_size(tool_threads)), max_message_bytes=max_message_bytes)  # fmt: skip
    app = FastAPI(title=f"agentenv: {bundle.name}", description=bundle.description)
    server = _AgentEnvHTTPServer(
        env=functools.partial(BundleEnvironment, served),
        action_cls=EpisodeAction,
        observation_cls=EpisodeObservation,
        max_concurrent_envs=capacity,
        env_name=bundle.name,
    )
    server.register_routes(app)

    @app.head("/health", include_in_schema=False)
    async def health_head() -> Response:
        """``HEAD /health`` for load balancers and probes (OpenEnv serves ``GET`` only)."""
        return Response(status_code=200)

    @app.get("/agentenv", tags=["agentenv"])
    async def info() -> dict[str, object]:
        """What this server serves: protocol version, bundle, splits and limits (``agentenv.wire.ServerInfo``)."""
        from . import __version__

        return wire.ServerInfo(
            protocol=wire.PROTOCOL,
            name=bundle.name,
            description=bundle.description,
            version=__version__,
            splits={s: len(bundle.split(s)) for s in bundle.splits},
            max_message_bytes=max_message_bytes,
            max_concurrent_envs=capacity,
            tool_timeout=tool_timeout,
            reset_timeout=reset_timeout,
        ).model_dump()

    async def teardown_all() -> None:
        """On shutdown, end every episode still running before the process exits."""
        await close_sessions(app)
        if guard.reaper is not None:
            guard.reaper.cancel()
            guard.reaper = None

    app.router.on_shutdown.insert(0, teardown_all)
    guard = GuardState(token=token.encode() if token else None, max_message_bytes=max_message_bytes,
                       idle_timeout=idle_timeout, capacity=capacity, fds=fds,
                       capacity_fix=lambda: server.capacity_fix)  # fmt: skip
    app.add_middleware(Guard, state=guard)
    app.state.agentenv = served
    app.state.openenv = server
    app.state.max_message_bytes = max_message_bytes
    app.state.max_frame_bytes = max_frame_bytes or max(MIN_FRAME_BYTES, 4 * max_message_bytes)
    app.state.guard = guard
    app.state.capacity_note = note
    return app


async def close_sessions(app: FastAPI) -> int:
    """Close every open session of ``app`` with code 1012, refuse new ones, and tear every episode down.

    Calls in flight are cancelled (sync tools abandoned on their threads) and their episodes fail as
    ``restarting``. Returns once every episode is torn down; callers bound it (``runner.Server`` by the
    shutdown grace). Returns how many sessions were open.
    """
    served: Served = app.state.agentenv
    closed = await app.state.guard.close_all()
    live = list(served.live)
    if live:
        log.info("tearing down %d running episode(s)", len(live))
    await asyncio.gather(*(env.end_episode() for env in live), return_exceptions=True)
    return closed


def _warm(bundle: Bundle) -> None:
    """Compile the argument checks of the tools known at load, so the first episode does not pay for them."""
    from agentenv.schema import argument_errors

    for tools in bundle.env_tools.values():
        for tool in tools or ():
            argument_errors(tool.name, tool.parameters, {})


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
