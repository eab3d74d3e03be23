"""A bundle played in this process: the client's sessions and Task API over the engine, with no server.

``Here`` loads the bundle once and plays each session on the engine's ``Service`` (the code ``agentenv serve`` runs),
so a ``Session`` or ``Rollout`` made from ``Here.shared()`` plays exactly as it would against a server: the same
answers, deadlines, failures and records. ``played_here`` resolves a folder or an installed bundle's name and closes
what is left when its block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentenv.bundle import Bundle, find_bundle, load_bundle
from agentenv.client import Shared, run_sync
from agentenv.engine import RewardArg, Service, ToolThreads, pool_size
from agentenv.errors import AgentEnvError
from agentenv.local.connection import LocalConnection
from agentenv.record import Recorder
from agentenv.wire import Code

__all__ = ["Here", "played_here"]

log = logging.getLogger("agentenv.local")


class Here:
    """``bundle`` (a ``Bundle``, a folder, or an installed bundle's name) played in this process.

    ``tool_timeout``/``reset_timeout`` are the engine's deadlines (a server's ``build_app`` takes the same);
    ``reward`` a rule for every task instead of each task's own; ``tool_threads`` the pool for sync tools, deploys,
    teardowns and verifiers; ``record`` a folder (or a ``Recorder``) that gets every episode's record;
    ``max_sessions`` the sessions open at once (a session past it is refused as a server at capacity refuses one;
    default: no limit); ``capacity_fix`` says how to raise it.
    """

    def __init__(
        self,
        bundle: Bundle | str | Path,
        *,
        tool_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        reward: RewardArg = None,
        tool_threads: int | None = None,
        record: str | Path | Recorder | None = None,
        max_sessions: int | None = None,
        capacity_fix: str = "max_sessions= of agentenv.local.Here",
    ) -> None:
        if not isinstance(bundle, Bundle):
            bundle = load_bundle(bundle)  # a folder, or an installed bundle's name (load_bundle resolves it)
        self.recorder = Recorder(record) if isinstance(record, str | Path) else record
        self.service = Service(
            bundle,
            tool_timeout,
            reset_timeout,
            reward,
            ToolThreads(pool_size(tool_threads)),
            on_end=self.recorder.episode_ended if self.recorder is not None else None,
        )
        self.url = f"local:{bundle.path}"
        self.max_sessions, self._capacity_fix = max_sessions, capacity_fix
        self._live: set[LocalConnection] = set()
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def bundle(self) -> Bundle:
        """The bundle played here."""
        return self.service.bundle

    def shared(self, **options: Any) -> Shared:
        """Client settings that play here (``options``: ``Shared``'s, such as ``client`` or ``waits_for_server``);
        the deadlines are the engine's unless given."""
        options.setdefault("tool_timeout", self.service.tool_timeout)
        options.setdefault("reset_timeout", self.service.reset_timeout)
        return Shared(self.url, here=self, **options)

    def connect(self) -> LocalConnection:
        """A new session (``agentenv.client.InProcess``)."""
        connection = LocalConnection(self.service.player(), self._live, self._background)
        if self.max_sessions is not None and len(self._live) > self.max_sessions:
            connection.refuse(
                Code.CAPACITY,
                f"at capacity: {self.max_sessions}/{self.max_sessions} sessions active. Wait for a session to end, "
                f"or play more at once: {self._capacity_fix}",
            )
        return connection

    def info(self) -> dict[str, Any]:
        """What a server of the bundle answers to ``GET /agentenv``."""
        from agentenv import __version__

        return self.service.info(__version__)

    def task_range(self, split: str, start: int, stop: int) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` of ``split``, as Task API rows."""
        return self.service.task_range(split, start, stop)

    async def aclose(self) -> None:
        """End every session still open (each episode torn down), wait for the teardowns, close the records."""
        live = list(self._live)
        if live:
            log.warning("%d session(s) of %s were still open; their episodes are torn down", len(live), self.url)
        await asyncio.gather(*(c.close() for c in live), return_exceptions=True)
        await asyncio.gather(*list(self._background), return_exceptions=True)
        self._live.clear()
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)

    def close(self) -> None:
        """``aclose`` for code with no event loop of its own (sessions played through ``agentenv.client``'s sync
        objects run on its background loop, where this tears them down)."""
        run_sync(self.aclose())


@contextlib.asynccontextmanager
async def played_here(
    bundle: Bundle | str | Path, fix: str = "give a bundle folder or an installed bundle's name", **options: Any
) -> AsyncIterator[Here]:
    """``Here`` of ``bundle`` (``options``: ``Here``'s) while the block runs, closed after it; a name that is neither a
    bundle folder nor an installed bundle's is refused, the message ending with ``fix``."""
    if not isinstance(bundle, Bundle):
        folder = find_bundle(bundle)
        if not (folder / "bundle.yaml").is_file():
            raise AgentEnvError(
                f"{bundle}: neither a bundle folder (no bundle.yaml there) nor an installed bundle's name (agentenv "
                f"bundles lists them); {fix}"
            )
        bundle = folder
    here = Here(bundle, **options)
    try:
        yield here
    finally:
        await here.aclose()
