"""The client: sessions and rollouts against an agentenv server, and what reads its tasks.

``Session`` is one connection (``Shared`` holds what its sessions share: the URL, the token, the timeouts); a
``Rollout`` is one episode on it. ``SyncSession``/``SyncRollout`` are the same for code without an event loop, and
``SessionPool``/``pooled`` share sessions across rollouts. ``iter_tasks``/``read_tasks``/``probe`` read a server's
tasks and what it serves. It imports nothing of the engine: a trainer's process needs the client only. A ``Shared`` with
``here`` (``agentenv.local``) plays a bundle in this process through the same objects (``InProcess``, ``Connection``).

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "Session": "session",
    "Shared": "settings",
    "Rollout": "rollout",
    "RolloutRecord": "rollout",
    "SyncRollout": "sync",
    "SyncSession": "sync",
    "run_sync": "sync",
    "SessionPool": "pool",
    "pooled": "pool",
    "PAGE": "taskapi",
    "iter_tasks": "taskapi",
    "probe": "taskapi",
    "read_tasks": "taskapi",
    "tasks_and_tools": "taskapi",
    "Closed": "transport",
    "Connection": "transport",
    "ErrorFrame": "transport",
    "InProcess": "transport",
    "Transport": "transport",
    "TransportError": "transport",
}

__all__ = [
    "PAGE",
    "Closed",
    "Connection",
    "ErrorFrame",
    "InProcess",
    "Rollout",
    "RolloutRecord",
    "Session",
    "SessionPool",
    "Shared",
    "SyncRollout",
    "SyncSession",
    "Transport",
    "TransportError",
    "iter_tasks",
    "pooled",
    "probe",
    "read_tasks",
    "run_sync",
    "tasks_and_tools",
]

if TYPE_CHECKING:
    from agentenv.client.pool import SessionPool, pooled
    from agentenv.client.rollout import Rollout, RolloutRecord
    from agentenv.client.session import Session
    from agentenv.client.settings import Shared
    from agentenv.client.sync import SyncRollout, SyncSession, run_sync
    from agentenv.client.taskapi import PAGE, iter_tasks, probe, read_tasks, tasks_and_tools
    from agentenv.client.transport import Closed, Connection, ErrorFrame, InProcess, Transport, TransportError


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
