"""``agentenv view DIR_OR_RESULTS``: a local web page over episode records or an eval run (``agentenv_server.view``).

It serves on loopback only, under a random token in the URL it prints; every asset ships with the package (no CDN).
"""

from __future__ import annotations

import argparse
import secrets

from agentenv.errors import AgentEnvError

__all__ = ["configure", "run"]

HELP = "see what the agent did: a local web page over records (agentenv serve --record) or eval results"


def configure(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv view``."""
    parser.add_argument(
        "source", metavar="DIR_OR_RESULTS", help="a records folder, or an eval --out folder or its results.jsonl"
    )
    parser.add_argument("--compare", metavar="OTHER", help="another run, shown against this one task by task")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")


def run(args: argparse.Namespace) -> int:
    """Serve the viewer until Ctrl-C."""
    import uvicorn
    from agentenv.hosts import is_loopback

    from ..runner import listening_socket
    from .app import build_viewer
    from .data import load

    if not is_loopback(args.host):
        raise AgentEnvError(
            f"--host {args.host}: the viewer shows transcripts and serves loopback only; give "
            "127.0.0.1 (reach it from elsewhere through an SSH tunnel)"
        )
    source = load(args.source)
    other = load(args.compare) if args.compare else None
    token = secrets.token_urlsafe(18)
    sock = listening_socket(args.host, args.port)
    sock.listen(128)  # connections wait in the backlog from now on: the URL works as soon as it is printed
    port = sock.getsockname()[1]
    app = build_viewer(source, token, compare=other)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"agentenv view: {len(source.rows)} from {args.source} at http://{host}:{port}/{token}/ (Ctrl-C stops)",
        flush=True,
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
