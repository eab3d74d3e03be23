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
from collections.abc import Collection
from pathlib import Path

from ._openenv import import_openenv

import_openenv()  # before any openenv import: keeps OpenEnv's Gradio UI out of the server process

from agentenv.bundle import Bundle, RewardSpec, load_bundle, reward_problems
from agentenv.engine import RewardArg, ToolThreads, pool_size
from agentenv.errors import AgentEnvError
from agentenv.plugins import plugins
from agentenv.record import DEFAULT_MAX_BYTES, Recorder
from fastapi import FastAPI, Response
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment

from ._api import check_internals
from .access import Access
from .ahead import Ahead
from .connections import HeadGate
from .environment import BundleEnvironment, EpisodeAction, EpisodeObservation, Served
from .guard import Guard, GuardState
from .limits import FdBudget, QuietAcceptErrors, fds_per_session
from .metrics import CONTENT_TYPE

__all__ = [
    "DEFAULT_MAX_CONCURRENT_ENVS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "EpisodeAction",
    "EpisodeObservation",
    "build_app",
    "close_sessions",
]

log = logging.getLogger("agentenv.server")

check_internals()  # every OpenEnv internal the server leans on (agentenv_server._api), before an app is built

DEFAULT_MAX_CONCURRENT_ENVS = 64
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # larger frames get MESSAGE_TOO_LARGE; the session goes on
MIN_FRAME_BYTES = 16 * 1024 * 1024  # larger frames end the connection (close code 1009): see max_frame_bytes
MAX_CONCURRENT_ENVS_VAR = "MAX_CONCURRENT_ENVS"
# the routes agentenv's clients use, and OpenEnv's read-only ones; the rest of what OpenEnv registers is not served:
# its simulation routes (POST /reset and /step deploy a whole episode per request, past admission and capacity,
# GET /state) and /mcp (HTTP and WebSocket: sessions that no client closes), and FastAPI's /docs and /openapi.json
SERVED_ROUTES = frozenset(
    {
        "/ws",
        "/health",
        "/agentenv",
        "/metrics",
        "/schema",
        "/metadata",
        "/list_environments",
        "/{env_name}/splits",
        "/{env_name}/tasks",
        "/{env_name}/num_tasks",
        "/{env_name}/task",
        "/{env_name}/task_range",
    }
)


class _AgentEnvHTTPServer(HTTPEnvServer):
    """OpenEnv's server, with a capacity error that says what to change (a backstop: the guard admits first)."""

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
    allow_origins: Collection[str] = (),
    allow_no_token: bool = False,
    max_concurrent_envs: int | None = None,
    reward: RewardArg = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    idle_timeout: float | None = 900.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_frame_bytes: int | None = None,
    tool_threads: int | None = None,
    record: str | Path | Recorder | None = None,
    record_max_bytes: int = DEFAULT_MAX_BYTES,
    warm: int = 0,
) -> FastAPI:
    """Serve ``bundle`` as an OpenEnv environment server (a FastAPI app; run it with uvicorn).

    ``token``: every request but ``GET /health`` needs ``Authorization: Bearer <token>``. Without one, a request
    that arrives on an address that is not loopback is refused (403) unless ``allow_no_token``. ``allow_origins``:
    the web pages (``https://host:port``) whose requests are served; a request with any other ``Origin`` is refused
    (403): browsers send one, agentenv's clients do not.
    ``max_concurrent_envs``: sessions at once (default: ``$MAX_CONCURRENT_ENVS``, else 64).
    ``reward``: a reward rule (name or callable over the scores) for every task, instead of each
    task's own. ``tool_timeout`` / ``reset_timeout``: deadlines of a tool call and of a deploy.
    ``idle_timeout``: seconds without a message before a session is closed and its episode torn down.
    ``max_message_bytes``: a larger frame is answered ``MESSAGE_TOO_LARGE`` and the session goes on.
    ``max_frame_bytes``: a larger frame is not read: the connection ends with close code 1009 (default: the
    larger of 16 MiB and 4 x ``max_message_bytes``; uvicorn's ``ws_max_size``).
    ``tool_threads``: the pool that runs sync tools, deploys, teardowns and verifiers (default:
    ``$AGENTENV_TOOL_THREADS``, else 32); async envs run on the event loop.
    ``record``: a folder (or an ``agentenv.record.Recorder``) that gets the record of every episode played, bounded by
    ``record_max_bytes`` (the oldest shards go first); a record that cannot be written never fails its episode.
    ``warm``: deployments of each toolset kept deployed ahead of the rollouts that will play them (``ahead``):
    a rollout's start takes one, so its first call waits for its task's setup step, not for a deploy.

    The soft limit on open files is raised to the hard limit, and the sessions are capped to what it
    leaves room for (``app.state.capacity_note`` says how many and why).
    """
    if not isinstance(bundle, Bundle):
        bundle = load_bundle(bundle)
    _check_reward(bundle, reward)
    if warm < 0:
        raise AgentEnvError(f"warm={warm}: give the deployments to keep ready per toolset, 0 or more")
    fds, capacity, note = _sized(bundle, _capacity(max_concurrent_envs))
    QuietAcceptErrors.install()
    _warm(bundle)
    recorder = Recorder(record, max_bytes=record_max_bytes) if isinstance(record, str | Path) else record
    served = Served(
        bundle=bundle,
        tool_timeout=tool_timeout,
        reset_timeout=reset_timeout,
        reward=reward,
        threads=ToolThreads(pool_size(tool_threads)),
        max_message_bytes=max_message_bytes,
        recorder=recorder,
    )
    app = FastAPI(title=f"agentenv: {bundle.name}", description=bundle.description, openapi_url=None)
    server = _openenv_server(app, served, capacity)
    _own_routes(app, served, capacity)
    access = Access(token.encode() if token else None, allow_origins=allow_origins, allow_no_token=allow_no_token)
    heads = HeadGate(room=fds.spare)  # the transport's (runner.uvicorn_config): its descriptors come out of fds.spare
    guard = GuardState(
        access=access,
        heads=heads,
        max_message_bytes=max_message_bytes,
        idle_timeout=idle_timeout,
        capacity=capacity,
        fds=fds,
        capacity_fix=lambda: server.capacity_fix,
    )
    _tear_down_at_shutdown(app, served, guard)
    _deploy_ahead(app, served, guard, warm=warm, deploy_timeout=reset_timeout, capacity=capacity, fds=fds)
    app.add_middleware(Guard, state=guard)
    _watched(served, guard, capacity)
    _keep_in_state(app, served, server, guard, max_frame_bytes, note)
    return app


def _keep_in_state(
    app: FastAPI, served: Served, server: _AgentEnvHTTPServer, guard: GuardState, max_frame_bytes: int | None, note: str
) -> None:
    """What the app's routes, its transport and its tests read from ``app.state``."""
    max_message_bytes = guard.max_message_bytes
    app.state.agentenv = served
    app.state.openenv = server
    app.state.max_message_bytes = max_message_bytes
    app.state.max_frame_bytes = max_frame_bytes or max(MIN_FRAME_BYTES, 4 * max_message_bytes)
    app.state.guard = guard
    app.state.heads = guard.heads
    app.state.capacity_note = f"{note}; {served.ahead.describe()}"


def _openenv_server(app: FastAPI, served: Served, capacity: int) -> _AgentEnvHTTPServer:
    """OpenEnv's server of ``served``, its routes on ``app``: those in ``SERVED_ROUTES``, no others."""
    server = _AgentEnvHTTPServer(
        env=functools.partial(BundleEnvironment, served),
        action_cls=EpisodeAction,
        observation_cls=EpisodeObservation,
        max_concurrent_envs=capacity,
        env_name=served.bundle.name,
    )
    server.register_routes(app)
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in SERVED_ROUTES]
    return server


def _tear_down_at_shutdown(app: FastAPI, served: Served, guard: GuardState) -> None:
    """Make ``app``'s first shutdown step end every running episode, close the recorder and stop the idle reaper."""

    async def teardown_all() -> None:
        """On shutdown, end every episode still running before the process exits."""
        await close_sessions(app)
        if served.recorder is not None:
            await asyncio.to_thread(served.recorder.close)  # what is queued reaches the disk before the exit
        if guard.reaper is not None:
            guard.reaper.cancel()
            guard.reaper = None

    app.router.on_shutdown.insert(0, teardown_all)


def _deploy_ahead(
    app: FastAPI, served: Served, guard: GuardState, *, warm: int, deploy_timeout: float, capacity: int, fds: FdBudget
) -> None:
    """Give ``served`` and ``guard`` the deployments kept ``warm`` ahead (``Ahead``), in the room the sessions and
    descriptors leave, filled when ``app`` starts."""
    ahead = served.ahead = guard.ahead = Ahead(
        served.bundle,
        warm,
        threads=served.threads,
        deploy_timeout=deploy_timeout,
        room=lambda: min(capacity - len(guard.connections) - ahead.held, fds.room()),
    )

    async def deploy_ahead() -> None:
        ahead.fill()

    app.router.on_startup.append(deploy_ahead)


def _check_reward(bundle: Bundle, reward: RewardArg) -> None:
    """Refuse a reward rule that is unknown or does not fit a task, naming both (the loader's check of a task's own)."""
    if reward is None or callable(reward):
        return
    spec = RewardSpec(rule=reward) if isinstance(reward, str) else reward
    plugin_set = bundle.plugin_set or plugins()  # the rules its episodes will score with
    for task in bundle.tasks:
        problems = reward_problems(spec, task, plugin_set)  # an unknown rule raises, naming the known ones
        if problems:
            raise AgentEnvError(f"reward={reward!r} does not fit task {task.id!r}: {'; '.join(map(str, problems))}")


def _sized(bundle: Bundle, requested: int) -> tuple[FdBudget, int, str]:
    """The descriptor budget, the sessions it holds (``requested`` or fewer) and the start-up line saying so."""
    fds = FdBudget.at_start(fds_per_session(bundle))
    capacity = fds.sessions(requested)
    note = fds.describe(capacity)
    if capacity < requested:
        need = requested * fds.per_session
        note = (
            f"max_concurrent_envs={requested} needs about {need} file descriptors, more than the limit of {fds.limit} "
            f"leaves room for: serving at most {capacity} sessions. Raise the limit (ulimit -n, systemd "
            "LimitNOFILE=) or lower --max-concurrent-envs"
        )
        log.warning("%s", note)
    return fds, capacity, note


def _watched(served: Served, guard: GuardState, capacity: int) -> None:
    """The gauges ``/metrics`` reads when scraped, and the refusals counted by reason."""
    metrics, recorder = served.metrics, served.recorder
    guard.refusals.metric = metrics.refused
    metrics.watch("agentenv_sessions_open", "Sessions (WebSockets) open now", lambda: len(guard.connections))
    metrics.watch("agentenv_sessions_max", "Sessions this server admits at once", lambda: capacity)
    metrics.watch("agentenv_episodes_running", "Episodes running now", lambda: len(served.live))
    if guard.fds is not None:
        fds = guard.fds
        metrics.watch(
            "agentenv_session_room",
            "Sessions the file descriptors left under the limit still fit",
            lambda: min(fds.room(), 1 << 20),
        )
    if recorder is not None:
        metrics.watch("agentenv_records_written", "Episode records written (--record)", lambda: recorder.written)
        metrics.watch("agentenv_records_dropped", "Episode records that could not be written", lambda: recorder.dropped)


def _own_routes(app: FastAPI, served: Served, capacity: int) -> None:
    """agentenv's routes beside OpenEnv's: ``HEAD /health``, ``GET /agentenv`` and ``GET /metrics``."""

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """The server's metrics in Prometheus' text format (``agentenv_server.metrics``)."""
        return Response(served.metrics.text(), media_type=CONTENT_TYPE)

    @app.head("/health", include_in_schema=False)
    async def health_head() -> Response:
        """``HEAD /health`` for load balancers and probes (OpenEnv serves ``GET`` only)."""
        return Response(status_code=200)

    @app.get("/agentenv", tags=["agentenv"])
    async def info() -> dict[str, object]:
        """What this server serves: protocol version, bundle, splits and limits (``agentenv.wire.ServerInfo``)."""
        from ._version import __version__

        return served.info(__version__, capacity)


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
    if served.ahead is not None:
        await served.ahead.close()
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
