"""What runs on Ray: a bundle server as a Ray Serve replica, and the router that spreads sessions.

Imported by the replicas and by Serve's proxies (the router), never by ``import agentenv_server``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentenv.sandbox import procs
from ray import serve
from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from .app import build_app, close_sessions
from .metrics import Metrics

__all__ = ["BundleReplica", "LeastBusyRouter"]

log = logging.getLogger("agentenv.server")

REPLICA_HEADER = "x-agentenv-replica"
WATCH_SECONDS = 1.0  # how often a replica asks Serve whether its application is being deleted


class LeastBusyRouter(FIFOMixin, RequestRouter):
    """Every replica is a candidate and the least busy one with room takes the request.

    Ray Serve's default router prefers replicas on the proxy's own node and only then looks further,
    so one node's replica would fill up (and refuse sessions at its limit) while another node's had
    room. An episode is long and heavy: spreading them evenly matters more than a network hop. For the
    same reason it asks every replica how busy it is each time rather than trusting a cache (Serve's
    cache would send a burst of new sessions to the one replica it has an entry for).
    """

    # a replica busy deploying envs may take a while to say how busy it is; Serve's 0.1 s would leave it out
    # of the choice (and send everything to the other), and an episode can wait a second to be placed well
    queue_len_response_deadline_s = 1.0
    max_queue_len_response_deadline_s = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["use_replica_queue_len_cache"] = False
        super().__init__(*args, **kwargs)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """One rank of every replica; Serve picks the one with the fewest ongoing requests that has room."""
        return [list(candidate_replicas)] if candidate_replicas else []


class _ReplicaHeader:
    """Names the replica that answered, in an ``x-agentenv-replica`` header (HTTP responses, WebSocket handshakes)."""

    def __init__(self, app: Any, *, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def named(message: dict[str, Any]) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, named if scope["type"] != "lifespan" else send)


class RayMetrics:
    """A replica's ``/metrics`` handed to Ray's metrics as Ray Serve's own are: every sample a gauge of the same name
    (``process_*`` as ``agentenv_process_*``) and labels, tagged with its deployment, replica and application, which
    each node's metrics agent exports (``ray start --metrics-export-port``) with Ray's ``ray_`` prefix.

    Values are copied, not events: a copy is exact whatever happened between two, and a replica Ray starts again
    is a new replica with series of its own. Counters stay cumulative (``rate()`` reads them); histograms keep their
    ``_bucket``/``_count``/``_sum`` series (``histogram_quantile`` reads them).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.registry = metrics.registry
        self._gauges: dict[str, Any] = {}

    def copy(self) -> None:
        """Copy every sample of the replica's registry into Ray's metrics."""
        from ray.serve import metrics as serve_metrics

        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):  # when a series began: no value to sum or rate
                    continue
                gauge = self._gauges.get(sample.name)
                if gauge is None:
                    name = sample.name if sample.name.startswith("agentenv_") else f"agentenv_{sample.name}"
                    gauge = serve_metrics.Gauge(name, description=family.documentation, tag_keys=tuple(sample.labels))
                    self._gauges[sample.name] = gauge
                gauge.set(sample.value, tags={key: value or "none" for key, value in sample.labels.items()})


_APP: list[Any] = []  # this replica's app: each Serve replica is its own process, holding one BundleReplica


def _this_replicas_app() -> Any:
    """The app this process's replica built: Serve calls an ingress builder right after the replica's ``__init__``
    (on every Ray in the range; newer ones also offer ``serve.ingress()`` with ``__serve_build_asgi_app__``, which
    2.48 lacks)."""
    return _APP[-1]


@serve.ingress(_this_replicas_app)
class BundleReplica:
    """One whole agentenv server (``build_app``): its own episodes, its own ``max_concurrent_envs``."""

    def __init__(self, bundle: str, options: dict[str, Any], token_var: str | None, capacity_fix: str) -> None:
        import os

        from agentenv.errors import AgentEnvError

        from .runner import redact_token

        token = os.environ.get(token_var) if token_var else None
        if token_var and not token:  # the token is read here, where the replica runs: Serve's GCS never holds it
            raise AgentEnvError(
                f"${token_var} is not set on the node of replica {serve.get_replica_context().replica_tag}: "
                f"set it on every node of the cluster (a Kubernetes Secret in the pods' env)"
            )
        # every program this replica starts (env programs, what a Python env starts) carries its owner tag, and the
        # replica's reaper kills them if Ray kills the replica (a crash, OOM, the end of a drain) before teardown
        procs.own_all_children()
        self._app = build_app(bundle, token=token, **options)
        self._app.state.openenv.capacity_fix = capacity_fix
        redact_token(self._app, loggers=("ray", "ray.serve", "agentenv"))
        self._app.add_middleware(_ReplicaHeader, replica=serve.get_replica_context().replica_tag)
        self._ray_metrics = RayMetrics(self._app.state.agentenv.metrics)
        self._watcher: asyncio.Task[None] | None = None
        self._app.router.on_startup.append(self._start_watch)
        self._app.router.on_shutdown.append(self._stop_watch)
        _APP.append(self._app)

    async def _watch(self) -> None:
        # Serve drains a deleted application's replicas by waiting for their open requests, and a session's
        # WebSocket stays open across episodes: close them ourselves once the application is being deleted
        # (serve.delete, serve shutdown, agentenv's own shutdown), so teardown runs before Ray kills anything
        name = serve.get_replica_context().app_name
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            self._ray_metrics.copy()
            try:
                status = await asyncio.to_thread(serve.status)
            except Exception:  # the controller is restarting or gone; the next look tells
                continue
            app = status.applications.get(name)
            if app is None or app.status == "DELETING":
                closed = await close_sessions(self._app)
                said = "application %r is being deleted: closed %d session(s), their episodes torn down"
                log.info(said, name, closed)
                return

    async def _start_watch(self) -> None:
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _stop_watch(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    def check_health(self) -> None:
        """Serve's health check: the replica answers, and its reaper runs (started again if it died)."""
        procs.own_all_children()
