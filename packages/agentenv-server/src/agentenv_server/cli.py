"""``agentenv serve BUNDLE``: serve a bundle on a port, with a token read from an environment variable."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from agentenv.errors import AgentEnvError

from ._serve_options import (
    access_options,
    connection_options,
    ray_options,
    record_options,
    sandbox_options,
    session_options,
)
from .serving import listen, refuse_passing_the_token, sandbox_note

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve``."""
    parser.add_argument("bundle", help="the bundle's folder, or an installed bundle's name (agentenv bundles)")
    access_options(parser)
    session_options(parser)
    connection_options(parser)
    record_options(parser)
    parser.add_argument("--log-level", default="info", help="uvicorn log level (default: info)")
    sandbox_options(parser)
    parser.add_argument(
        "--ors",
        action="store_true",
        help="serve the Open Reward Standard instead, for the openreward SDK (TRL's OpenRewardSpec): the token, if "
        "any, as X-API-Key; needs pip install 'agentenv-server[ors]'",
    )
    ray_options(parser)


def read_token(var: str | None) -> str | None:
    """The token from ``$var`` (None without ``--token-var``); refuses an unset or empty variable."""
    if var is None:
        return None
    token = os.environ.get(var)
    if not token:
        raise AgentEnvError(f"--token-var {var}: ${var} is not set or empty; export {var}=<token> first")
    return token


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C; every running episode is torn down before exit."""
    from agentenv.sandbox import procs

    from .app import build_app
    from .runner import Server, uvicorn_config

    token = read_token(args.token_var)
    _check_serving(args, token)
    if args.ray:
        if args.sandbox:
            raise AgentEnvError(
                "--sandbox/--no-sandbox do not reach Ray replicas: set AGENTENV_SANDBOX on their nodes instead"
            )
        _refuse_unapplied(args, "--ray", RAY_APPLIES)
        return run_ray(args, token)
    if args.ors:
        _refuse_unapplied(args, "--ors", ORS_APPLIES)
        from .ors import run_ors

        return run_ors(args, token)
    _refuse_ray_options(args)
    sock = listen(args.host, args.port)  # taken first: a busy port is said before anything claims to serve
    port = sock.getsockname()[1]
    app = build_app(
        args.bundle,
        token=token,
        allow_origins=args.allow_origin,
        allow_no_token=args.allow_no_token,
        max_concurrent_envs=args.max_concurrent_envs,
        reward=args.reward,
        tool_timeout=args.tool_timeout,
        reset_timeout=args.reset_timeout,
        idle_timeout=args.idle_timeout,
        max_message_bytes=args.max_message_bytes,
        max_frame_bytes=args.max_frame_bytes,
        tool_threads=args.tool_threads,
        record=args.record,
        record_max_bytes=args.record_max_bytes,
        warm=args.warm,
    )
    procs.own_all_children()  # every program an env starts dies with this server, however it exits
    bundle = app.state.agentenv.bundle
    refuse_passing_the_token(bundle, args.token_var)
    print(f"agentenv: {sandbox_note(bundle, args.sandbox)}", file=sys.stderr, flush=True)
    _say_serving(args, app, token, port)
    config = uvicorn_config(
        app,
        host=args.host,
        port=port,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_interval,
        log_level=args.log_level,
        grace=args.shutdown_grace,
        loop=args.loop,
        header_timeout=args.header_timeout,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again; this handler makes that
    # second delivery a clean exit (status 0) instead of death by signal
    signal.signal(signal.SIGTERM, _exit_cleanly)
    Server(config, grace=args.shutdown_grace, watchdog=True).run(sockets=[sock])
    return 0


def _check_serving(args: argparse.Namespace, token: str | None) -> None:
    """Refuse (``AgentEnvError``) half a TLS pair, a host reachable from other machines without a token unless
    ``--allow-no-token``, and ``--ray`` with ``--ors``."""
    from .runner import is_loopback

    if bool(args.ssl_keyfile) != bool(args.ssl_certfile):
        raise AgentEnvError("--ssl-keyfile and --ssl-certfile go together: give both (a PEM key and its certificate)")
    if token is None and not is_loopback(args.host) and not args.allow_no_token:
        raise AgentEnvError(
            f"--host {args.host} is reachable from other machines and no token is set: give --token-var NAME "
            "(and export NAME=<token>), or pass --allow-no-token if the network is trusted"
        )
    if args.ray and args.ors:
        raise AgentEnvError("--ors serves one process: drop --ray (or --ors)")


# What each other way of serving honours of agentenv serve's options (by argparse dest); the rest are refused when
# given, never dropped in silence (a --record that records nothing loses what the user asked for)
_BOTH = {
    *("bundle", "host", "port", "token_var", "allow_no_token", "max_concurrent_envs", "tool_timeout", "reset_timeout"),
    *("reward", "log_level", "ray", "ors", "sandbox"),
}
RAY_APPLIES = _BOTH | {"idle_timeout", "warm", "replicas", "autoscale", "ray_address", "replica_cpus", "drain_seconds"}
ORS_APPLIES = _BOTH | {"shutdown_grace"}


def _refuse_unapplied(args: argparse.Namespace, mode: str, applies: set[str]) -> None:
    """Refuse (``AgentEnvError``) the options given that ``mode`` does not honour, naming each."""
    defaults = argparse.ArgumentParser()
    configure(defaults)
    default = vars(defaults.parse_args([args.bundle]))
    given = sorted(
        f"--{dest.replace('_', '-')}"
        for dest, value in vars(args).items()
        if dest in default and dest not in applies and value != default[dest]
    )
    if given:
        raise AgentEnvError(
            f"{', '.join(given)}: not honoured with {mode}: drop {'them' if len(given) > 1 else 'it'}, or serve "
            f"without {mode}"
        )


def _refuse_ray_options(args: argparse.Namespace) -> None:
    """Refuse (``AgentEnvError``) ``--replicas``, ``--autoscale`` and ``--ray-address`` without ``--ray``."""
    given = [
        f
        for f, v in (
            ("--replicas", args.replicas),
            ("--autoscale", args.autoscale),
            ("--ray-address", args.ray_address),
        )
        if v is not None
    ]
    if given:
        raise AgentEnvError(f"{', '.join(given)} only apply with --ray (agentenv serve BUNDLE --ray {given[0]} ...)")


def _say_serving(args: argparse.Namespace, app: Any, token: str | None, port: int) -> None:
    """Print to stderr what is served, where, with which auth, and with what capacity (and the record's folder)."""
    bundle = app.state.agentenv.bundle
    auth = f"bearer token from ${args.token_var}" if token else "no token"
    if args.record:
        print(f"agentenv: recording every episode under {args.record}", file=sys.stderr, flush=True)
    scheme = "https" if args.ssl_certfile else "http"
    print(
        f"agentenv: serving bundle {bundle.name!r} ({len(bundle.tasks)} tasks; splits {', '.join(bundle.splits)}) "
        f"on {scheme}://{args.host}:{port} with {auth}",
        file=sys.stderr,
        flush=True,
    )
    print(
        f"agentenv: {app.state.capacity_note}; {app.state.agentenv.threads.size} tool threads; shutdown grace "
        f"{args.shutdown_grace:g} s",
        file=sys.stderr,
        flush=True,
    )


def _autoscale(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    low, sep, high = value.partition(":")
    if not sep or not low.isdigit() or not high.isdigit():
        raise AgentEnvError(f"--autoscale {value}: give MIN:MAX replicas, e.g. --autoscale 1:8")
    return int(low), int(high)


def run_ray(args: argparse.Namespace, token: str | None) -> int:
    """Serve on Ray Serve until SIGTERM or Ctrl-C; then every session on every replica is closed and torn down."""
    import threading

    try:
        from .ray import deploy
    except ImportError as exc:
        raise AgentEnvError(f"--ray: {exc}") from None
    autoscale = _autoscale(args.autoscale)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()  # the shutdown below runs once, on this thread

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = deploy(
            args.bundle,
            token_var=args.token_var,
            allow_no_token=args.allow_no_token,
            replicas=args.replicas or 1,
            autoscale=autoscale,
            ray_address=args.ray_address,
            host=args.host,
            port=args.port,
            max_concurrent_envs=args.max_concurrent_envs,
            reward=args.reward,
            tool_timeout=args.tool_timeout,
            reset_timeout=args.reset_timeout,
            idle_timeout=args.idle_timeout,
            replica_cpus=args.replica_cpus,
            drain_seconds=args.drain_seconds,
            warm=args.warm,
        )
    except SystemExit as stopped:
        # ray.init turns SIGTERM into SystemExit(15); deploy has already deleted what it had deployed
        if stopped.code != signal.SIGTERM:
            raise
        print("agentenv: stopped while deploying; nothing is left deployed", file=sys.stderr, flush=True)
        return 0
    # ray.init put its own SIGTERM handler in (it exits at once, with status 15): ours again
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scale = f"{autoscale[0]}..{autoscale[1]} replicas" if autoscale else f"{args.replicas or 1} replica(s)"
    auth = f"bearer token from ${args.token_var}" if token else "no token"
    print(
        f"agentenv: serving bundle {args.bundle} on Ray Serve ({scale}, Ray at {server.ray_address}) on "
        f"{server.url} with {auth}",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        print("agentenv: shutting down: closing every session on every replica", file=sys.stderr, flush=True)
        server.shutdown()
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
