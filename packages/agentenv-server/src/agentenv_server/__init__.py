"""agentenv-server: serve an agentenv bundle as an OpenEnv environment server.

    from agentenv_server import build_app
    app = build_app("examples/bundles/inbox", token=os.environ["AGENTENV_TOKEN"])
    # uvicorn.run(app, host="0.0.0.0", port=8000)   or: agentenv serve examples/bundles/inbox

The app is OpenEnv 0.10's own server: an episode is an OpenEnv session on ``/ws``, and the tasks
are served through OpenEnv's Task API. The names below load on first use, so that loading the
plugin (every ``agentenv`` command does) does not import the server stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

from ._version import __version__ as __version__  # read from the installed metadata (_version.py)

_EXPORTS = {
    "DEFAULT_MAX_CONCURRENT_ENVS": "app",
    "EpisodeAction": "app",
    "EpisodeObservation": "app",
    "build_app": "app",
    "ServerThread": "runner",
    "import_openenv": "_openenv",
}

__all__ = [
    "DEFAULT_MAX_CONCURRENT_ENVS",
    "EpisodeAction",
    "EpisodeObservation",
    "ServerThread",
    "build_app",
    "import_openenv",
]

if TYPE_CHECKING:
    from ._openenv import import_openenv
    from .app import DEFAULT_MAX_CONCURRENT_ENVS, EpisodeAction, EpisodeObservation, build_app
    from .runner import ServerThread


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
