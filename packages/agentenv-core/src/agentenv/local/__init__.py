"""A bundle played in this process, through the client's own objects: no server, no port, no OpenEnv.

``Here(bundle).shared()`` gives client settings (``agentenv.client.Shared``) whose sessions, rollouts and Task API
reads are played by the engine in this process (``agentenv.engine.Service``, what ``agentenv serve`` runs), the way
httpx's ``ASGITransport`` serves an app without a socket. ``played_here`` does it for the length of a block.

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {"Here": "here", "played_here": "here", "LocalConnection": "connection"}

__all__ = ["Here", "LocalConnection", "played_here"]

if TYPE_CHECKING:
    from agentenv.local.connection import LocalConnection
    from agentenv.local.here import Here, played_here


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
