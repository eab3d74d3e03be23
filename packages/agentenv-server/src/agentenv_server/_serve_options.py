"""The arguments of ``agentenv serve``, in groups; ``cli.configure`` adds them in the order ``--help`` shows them."""

from __future__ import annotations

import argparse

from agentenv.record import DEFAULT_MAX_BYTES

__all__ = [
    "access_options",
    "connection_options",
    "ray_options",
    "record_options",
    "sandbox_options",
    "session_options",
]


def access_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve`` that say where it listens and whom it serves."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    parser.add_argument(
        "--token-var",
        metavar="NAME",
        help="environment variable holding the bearer token clients must send (the token itself is never an "
        "argument or a file, and never logged)",
    )
    parser.add_argument("--allow-no-token", action="store_true", help="serve a non-loopback host without a token")
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web page (https://host:port) whose requests are served; repeat for more (default: none: a request "
        "that carries an Origin header, as browsers send, is refused)",
    )


def session_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve`` that say how it runs sessions: how many, their deadlines, the reward rule,
    the shutdown grace, the event loop, the tool threads and the largest frames."""
    parser.add_argument(
        "--max-concurrent-envs",
        type=int,
        metavar="N",
        help="sessions at once (default: $MAX_CONCURRENT_ENVS, else 64)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        metavar="N",
        help="deploy ahead: keep N deployed, never-played episodes ready per toolset, so a rollout's start takes one "
        "instead of waiting for a deploy (default 0: each rollout deploys its own)",
    )
    parser.add_argument("--tool-timeout", type=float, default=60.0, help="seconds a tool call may take")
    parser.add_argument("--reset-timeout", type=float, default=300.0, help="seconds a deploy may take")
    parser.add_argument("--idle-timeout", type=float, default=900.0, help="seconds before an idle session is closed")
    parser.add_argument("--ping-interval", type=float, default=20.0, help="keepalive ping period (half-open reaping)")
    parser.add_argument("--reward", help="a reward rule applied to every task instead of its own (e.g. mean)")
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long episodes may take to tear down before their env programs are killed (default 10)",
    )
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="the event loop (default: uvloop where installed, else asyncio)",
    )
    parser.add_argument(
        "--tool-threads",
        type=int,
        metavar="N",
        help="threads for sync tools, deploys and verifiers (default: $AGENTENV_TOOL_THREADS, else 32); async envs "
        "run on the event loop",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=4 * 1024 * 1024,
        metavar="N",
        help="a larger frame is answered MESSAGE_TOO_LARGE and the session goes on (default 4 MiB)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        metavar="N",
        help="a larger frame is not read: the connection ends with close code 1009 (default: 16 MiB or 4x "
        "--max-message-bytes, whichever is larger)",
    )


def connection_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve`` for TLS and for how long a connection's headers may take."""
    parser.add_argument("--ssl-keyfile", metavar="PATH", help="serve TLS (https://, wss://) with this private key")
    parser.add_argument("--ssl-certfile", metavar="PATH", help="serve TLS with this certificate (chain), PEM")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="a connection's request line and headers must be in within this many seconds (default 20)",
    )


def record_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve`` that record every episode played."""
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="write the record of every episode played to DIR (JSON-lines shards; read them with agentenv view DIR or "
        "agentenv.record.read)",
    )
    parser.add_argument(
        "--record-max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="the most the --record folder holds; past it the oldest shards are removed (default 10 GiB)",
    )


def sandbox_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve`` that choose the sandbox (``--sandbox``, ``--no-sandbox``)."""
    box = parser.add_mutually_exclusive_group()
    box.add_argument(
        "--sandbox",
        metavar="NAME",
        help="the sandbox that runs bash commands, subprocess env programs and agents (default: $AGENTENV_SANDBOX, "
        "else bwrap; a plugin adds others)",
    )
    box.add_argument(
        "--no-sandbox",
        action="store_const",
        const="none",
        dest="sandbox",
        help="run them on the host, unsandboxed (the explicit hole: they can read the bundle's answer keys)",
    )


def ray_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv serve --ray``."""
    ray = parser.add_argument_group("Ray Serve (pip install 'agentenv-server[ray]')")
    ray.add_argument("--ray", action="store_true", help="serve on Ray Serve: replicas behind one address")
    scale = ray.add_mutually_exclusive_group()
    scale.add_argument("--replicas", type=int, metavar="N", help="replicas, each with its own sessions (default 1)")
    scale.add_argument("--autoscale", metavar="MIN:MAX", help="let Serve scale between MIN and MAX replicas")
    ray.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="a running Ray cluster (auto, HOST:6379); default: start a local Ray on loopback",
    )
    ray.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs Ray reserves for each replica (default 1)")
    ray.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="how long a stopped replica's episodes may run before Ray kills it (default 30)",
    )
