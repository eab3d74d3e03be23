"""A bundle served past one machine: the bundle server as a Ray Serve application.

    from agentenv_server.ray import deploy
    server = deploy("examples/bundles/inbox", replicas=2, token_var="AGENTENV_TOKEN")
    server.url        # one address: /ws, /health and the Task API, as with agentenv serve
    server.shutdown() # every session on every replica closed (1012), every episode torn down

Each replica is a whole agentenv server (``build_app``) with its own episodes and its own
``max_concurrent_envs``; Serve's proxy puts them behind one HTTP/WebSocket address and a WebSocket
stays on the replica that took it. ``agentenv serve BUNDLE --ray`` runs the same. Needs
``pip install 'agentenv-server[ray]'``: the Ray range is that extra's, checked when this module loads.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.bundle import load_bundle
from agentenv.engine import RewardArg
from agentenv.errors import AgentEnvError
from agentenv.hosts import is_loopback

from .app import _capacity
from .integration import RAY

__all__ = [
    "HEADROOM",
    "INSTALL",
    "RayServe",
    "application",
    "build_application",
    "check_ray",
    "deploy",
    "deployment_options",
    "supported",
]

log = logging.getLogger("agentenv.server")

INSTALL = RAY.install  # pip install 'agentenv-server[ray]'
# requests a replica takes past its sessions: Task API and /health calls, and the session that is told the
# whole cluster is full (Serve routes nothing to a replica at max_ongoing_requests)
HEADROOM = 4
# a local Ray for one machine: no dashboard, a small object store (requests carry frames, not objects)
LOCAL_OBJECT_STORE_BYTES = 80 * 1024 * 1024


def supported() -> str:
    """The supported Ray range, as agentenv-server's ``ray`` extra declares it (``ray>=2.56.1,<2.61``)."""
    return RAY.requirement


def check_ray(version: str | None = None) -> str:
    """Return the installed Ray version (or ``version``); ``ImportError`` naming both versions and the fix otherwise.

    Reads distribution metadata only: Ray is imported when a bundle is deployed.
    """
    return RAY.check(version, why="agentenv serve --ray runs on Ray Serve")


check_ray()


def _import_serve() -> Any:
    try:
        from ray import serve
    except ImportError as exc:  # ray without its serve extra lacks Serve's own dependencies
        raise ImportError(f"Ray {check_ray()} is installed without Ray Serve ({exc}): {INSTALL}") from None
    return serve


def deployment_options(
    max_concurrent_envs: int,
    *,
    replicas: int = 1,
    autoscale: tuple[int, int] | None = None,
    replica_cpus: float = 1.0,
    drain_seconds: float = 30.0,
) -> dict[str, Any]:
    """The Ray Serve settings of the bundle deployment (``serve.deployment(...).options(**these)``).

    ``max_ongoing_requests`` is the replica's sessions plus ``HEADROOM``: Serve never routes to a replica at
    it, so the router (``LeastBusyRouter``) sends each new session to the least busy replica with room.
    ``autoscale=(min, max)`` scales on ongoing requests, aiming at 80% of a replica's sessions; scale-down
    waits 10 minutes, since it drains a replica and ends its episodes. ``drain_seconds``: how long a
    replica that is stopped lets its episodes run before Ray kills it (and its reaper the env programs).
    """
    from ray.serve.config import RequestRouterConfig

    from ._replica import LeastBusyRouter

    if autoscale is not None:
        low, high = autoscale
        if not 0 <= low <= high or high < 1:
            raise AgentEnvError(f"--autoscale {low}:{high}: give MIN:MAX with 0 <= MIN <= MAX and MAX >= 1")
        scaling: dict[str, Any] = {
            "autoscaling_config": {
                "min_replicas": low,
                "initial_replicas": max(low, 1),
                "max_replicas": high,
                "target_ongoing_requests": max(1.0, 0.8 * max_concurrent_envs),
                "upscale_delay_s": 10.0,
                "downscale_delay_s": 600.0,
            }
        }
    else:
        if replicas < 1:
            raise AgentEnvError(f"--replicas {replicas}: give at least 1 (or --autoscale MIN:MAX)")
        scaling = {"num_replicas": replicas}
    return {
        **scaling,
        "max_ongoing_requests": max_concurrent_envs + HEADROOM,
        "max_queued_requests": -1,  # past every replica's room, requests wait at the proxy (the client bounds it)
        "request_router_config": RequestRouterConfig(request_router_class=LeastBusyRouter),
        "graceful_shutdown_timeout_s": drain_seconds,
        "graceful_shutdown_wait_loop_s": 1.0,
        "health_check_period_s": 10.0,
        "health_check_timeout_s": 30.0,
        "ray_actor_options": {"num_cpus": replica_cpus},
    }


def _capacity_fix(replicas: int, autoscale: tuple[int, int] | None, per_replica: int) -> str:
    scale = f"--autoscale {autoscale[0]}:{autoscale[1]}" if autoscale else f"--replicas {replicas}"
    return (
        f"serve it with more: every replica is full ({per_replica} sessions each, {scale}). Add replicas "
        f"(agentenv serve --ray --replicas N, or a higher --autoscale MAX) or raise the per-replica limit "
        f"(--max-concurrent-envs, or max_concurrent_envs= in agentenv_server.ray.deploy)"
    )


@dataclass
class RayServe:
    """A bundle served on Ray Serve: its URL, and how to shut it down."""

    url: str
    name: str
    ray_address: str
    owns_ray: bool
    _connected: bool = field(default=False, repr=False)  # this call connected to Ray: disconnect at shutdown
    _closed: bool = field(default=False, repr=False)

    def shutdown(self) -> None:
        """Close every session on every replica (1012) and tear its episode down, then delete the application.

        A Ray this process started is shut down too; on a cluster, Serve and Ray keep running.
        """
        if self._closed:
            return
        self._closed = True
        import ray
        from ray import serve

        try:
            serve.delete(self.name)  # each replica sees it and closes its sessions (see _replica.BundleReplica)
        finally:
            if self.owns_ray:
                serve.shutdown()
            if self._connected:
                ray.shutdown()

    def __enter__(self) -> RayServe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def application(
    bundle: str,
    *,
    token_var: str | None = None,
    allow_no_token: bool = False,
    replicas: int = 1,
    autoscale: tuple[int, int] | None = None,
    max_concurrent_envs: int | None = None,
    reward: RewardArg = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    idle_timeout: float | None = 900.0,
    replica_cpus: float = 1.0,
    drain_seconds: float = 30.0,
    warm: int = 0,
) -> Any:
    """The bundle server as a Ray Serve application (``serve.run`` it, or let ``deploy`` do it).

    ``bundle`` is the folder's path as the replicas see it. ``token_var``: the variable each replica reads its token
    from, where it runs: the token itself is never a bound argument (Serve keeps those in Ray's GCS). See ``deploy``
    for the rest.
    """
    serve = _import_serve()
    from ._replica import BundleReplica

    capacity = _capacity(max_concurrent_envs)
    options = deployment_options(
        capacity, replicas=replicas, autoscale=autoscale, replica_cpus=replica_cpus, drain_seconds=drain_seconds
    )
    app_options = {
        "max_concurrent_envs": capacity,
        "reward": reward,
        "tool_timeout": tool_timeout,
        "reset_timeout": reset_timeout,
        "idle_timeout": idle_timeout,
        "allow_no_token": allow_no_token,
        "warm": warm,  # per replica
    }
    deployment = serve.deployment(BundleReplica, name="bundle").options(**options)
    return deployment.bind(bundle, app_options, token_var, _capacity_fix(replicas, autoscale, capacity))


def build_application(args: dict[str, Any]) -> Any:
    """Serve's application builder (``import_path: agentenv_server.ray:build_application``; KubeRay's RayService).

    ``args``: ``bundle`` (its path on the nodes), ``token_var`` (the variable holding the token, read by each
    replica where it runs: set it on every node), ``replicas`` or ``autoscale`` ("MIN:MAX"), and
    ``allow_no_token``, ``max_concurrent_envs``, ``reward``, ``tool_timeout``, ``reset_timeout``, ``idle_timeout``,
    ``replica_cpus``, ``drain_seconds``.
    """
    known = set(inspect.signature(application).parameters)  # application's arguments, bundle first
    unknown = sorted(set(args) - known)
    if unknown or "bundle" not in args:
        problem = f"unknown {', '.join(unknown)}" if unknown else "no bundle"
        allowed = ", ".join(sorted(known - {"bundle"}))
        give = f"give bundle (its path on the nodes) and any of {allowed}"
        raise AgentEnvError(f"agentenv_server.ray:build_application args: {problem}; {give}")
    options = dict(args)
    bundle = str(options.pop("bundle"))
    if "autoscale" in options:
        low, _, high = str(options.pop("autoscale")).partition(":")
        options["autoscale"] = (int(low), int(high))
    return application(bundle, **options)


def deploy(
    bundle: str | Path,
    *,
    token_var: str | None = None,
    allow_no_token: bool = False,
    replicas: int = 1,
    autoscale: tuple[int, int] | None = None,
    ray_address: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "agentenv",
    route_prefix: str = "/",
    max_concurrent_envs: int | None = None,
    reward: RewardArg = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    idle_timeout: float | None = 900.0,
    replica_cpus: float = 1.0,
    drain_seconds: float = 30.0,
    ship_bundle: bool = True,
    local_cpus: int | None = None,
    warm: int = 0,
) -> RayServe:
    """Serve ``bundle`` as the Ray Serve application ``name`` and return once every replica answers.

    ``ray_address``: a running cluster (``auto``, ``HOST:6379``, ``ray://HOST:10001``); without it, a Ray
    already initialised in this process, else a local Ray on loopback (``local_cpus``, default all cores)
    that ``shutdown`` stops. ``host``/``port``: where Serve's proxy listens (on every node of a cluster).
    ``replicas`` or ``autoscale=(min, max)``, ``replica_cpus`` and ``drain_seconds``: see
    ``deployment_options``. ``ship_bundle`` (with ``ray_address``): upload the bundle folder as the
    job's ``working_dir`` rather than read it at the same path on every node (a local Ray, or one this
    process initialised, reads the path). ``token_var``: the variable holding the token, which each replica reads
    where it runs (a Ray this call starts inherits this process's environment; on a cluster, set it on every node):
    the token is never a bound argument, which Serve keeps in Ray's GCS. Without one, a non-loopback ``host`` (or a
    Serve already listening on one) is refused unless ``allow_no_token``. The rest is ``build_app``'s.
    """
    if token_var is not None and not os.environ.get(token_var):
        raise AgentEnvError(f"token_var {token_var}: ${token_var} is not set or empty; export {token_var}=<token>")
    _refuse_public_without_token(host, token_var, allow_no_token)
    if ray_address is None and "ray" not in sys.modules:
        # a Ray started here is this machine's alone: every part of it on loopback, not the node's address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    serve = _import_serve()
    import ray
    from ray.serve.config import HTTPOptions

    path = Path(bundle).resolve()
    load_bundle(path)  # a bad bundle is refused here, with every problem named, not in each replica's log
    shipped = ship_bundle and ray_address is not None  # a shipped bundle is the replicas' working directory
    app = application(
        "." if shipped else str(path),
        token_var=token_var,
        allow_no_token=allow_no_token,
        replicas=replicas,
        autoscale=autoscale,
        max_concurrent_envs=max_concurrent_envs,
        reward=reward,
        tool_timeout=tool_timeout,
        reset_timeout=reset_timeout,
        idle_timeout=idle_timeout,
        replica_cpus=replica_cpus,
        drain_seconds=drain_seconds,
        warm=warm,
    )
    owns = _connect(ray_address, local_cpus, working_dir=path if shipped else None)
    try:
        serve.start(http_options=HTTPOptions(host=host, port=port))
        host, port = _serving_at(host, port)  # a Serve that already ran keeps its own (Ray's rule)
        _refuse_public_without_token(host, token_var, allow_no_token, " (Serve already listened there)")
        serve.run(app, name=name, route_prefix=route_prefix, blocking=False)
        _wait_for_replicas(host, port, route_prefix, autoscale[0] if autoscale else replicas, timeout=reset_timeout)
    except BaseException:  # a failed deploy, or SIGTERM / Ctrl-C during it: leave nothing deployed or running
        _undo(serve, ray, name, owns=owns, connected=owns or ray_address is not None)
        raise
    address = ray.get_runtime_context().gcs_address
    shown = f"[{host}]" if ":" in host else host
    prefix = "" if route_prefix == "/" else route_prefix.rstrip("/")
    url = f"http://{shown}:{port}{prefix}"
    return RayServe(url=url, name=name, ray_address=address, owns_ray=owns, _connected=owns or ray_address is not None)


def _undo(serve: Any, ray: Any, name: str, *, owns: bool, connected: bool) -> None:
    with contextlib.suppress(Exception):
        serve.delete(name)
    if owns:
        with contextlib.suppress(Exception):
            serve.shutdown()
    if connected:
        ray.shutdown()  # stops the Ray this call started; leaves a cluster's running (disconnects)


def _refuse_public_without_token(host: str, token_var: str | None, allow_no_token: bool, said: str = "") -> None:
    if token_var is None and not allow_no_token and not is_loopback(host):
        raise AgentEnvError(
            f"host {host} is reachable from other machines and no token is set: give token_var= (--token-var NAME, "
            "and export NAME=<token>), or pass allow_no_token=True (--allow-no-token) if the network is trusted" + said
        )


def _serving_at(host: str, port: int) -> tuple[str, int]:
    """Where Serve's proxies listen: what ``serve.start`` was given, unless Serve already ran with its own."""
    try:
        from ray.serve.context import _get_global_client

        options = _get_global_client().http_config
        return str(options.host), int(options.port)
    except Exception:  # a Serve without that private face: assume it took what it was given
        return host, port


def _wait_for_replicas(host: str, port: int, route_prefix: str, replicas: int, *, timeout: float) -> None:
    """Return once the proxy here routes to ``replicas`` replicas: Serve reports an application running
    before its proxy knows every replica, and a burst of sessions then lands on the first one."""
    import asyncio

    import httpx

    from ._replica import REPLICA_HEADER

    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{f'[{local}]' if ':' in local else local}:{port}{route_prefix.rstrip('/')}/health"

    async def answering() -> set[str]:
        async with httpx.AsyncClient(timeout=10) as client:
            answers = await asyncio.gather(*(client.get(url) for _ in range(2 * replicas)), return_exceptions=True)
        return {a.headers.get(REPLICA_HEADER, "") for a in answers if isinstance(a, httpx.Response)} - {""}

    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen |= asyncio.run(answering())
        if len(seen) >= replicas:
            return
        time.sleep(0.5)
    said = f"only {len(seen)} of {replicas} replicas answered on {url} within {timeout:g} s; see the replicas' logs"
    raise AgentEnvError(f"Ray Serve reported the application running, but {said} (serve status)")


def _connect(ray_address: str | None, local_cpus: int | None, working_dir: Path | None) -> bool:
    """Connect to Ray; True when this call started a local Ray (which the caller then owns)."""
    import ray

    if ray_address is None and ray.is_initialized():
        return False
    if ray_address is not None:
        # Ray uploads a local working_dir only for a job (ray.init), and Serve's replicas inherit the job's
        runtime_env = {"working_dir": str(working_dir)} if working_dir is not None else None
        ray.init(address=ray_address, namespace="agentenv", log_to_driver=True, runtime_env=runtime_env)
        return False
    ray.init(
        address="local",
        namespace="agentenv",
        num_cpus=local_cpus or os.cpu_count() or 1,
        include_dashboard=False,
        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        log_to_driver=True,
    )
    return True
