"""One session of a bundle played in this process: ``agentenv.client``'s ``Connection`` over the engine's ``Player``.

A request is the frame a server would read (its data through JSON, so the engine sees what it would over ``/ws``) and
the answer is the server's observation, as its fields. A request runs in a task of its own, as on a server: a client
that stops waiting (its deadline) drops the connection, and the episode is abandoned as a lost connection, then torn
down; the call itself is never cancelled under the episode's feet first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Mapping
from typing import Any

from agentenv import wire
from agentenv.client import Closed, ErrorFrame
from agentenv.client.transport import standard_json
from agentenv.engine import Player

__all__ = ["LocalConnection"]


class LocalConnection:
    """A session played by ``player`` in this process, in ``live`` while open; ``background`` holds teardowns nobody
    waits for."""

    def __init__(self, player: Player, live: set[LocalConnection], background: set[asyncio.Task[Any]]) -> None:
        self.open_timeout = 0.0  # nothing to connect to
        self._player = player
        self._live = live
        self._background = background
        live.add(self)
        self._open = True
        self._running: asyncio.Task[dict[str, Any]] | None = None
        self._refused: ErrorFrame | None = None

    def refuse(self, code: str, message: str) -> None:
        """Refuse the session (at capacity, say): its first request is answered with this error, then it is closed,
        as a server refuses a session it cannot take."""
        self._refused = ErrorFrame(code, message, {})
        self._live.discard(self)

    @property
    def is_open(self) -> bool:
        """Whether the session is open."""
        return self._open

    def closed(self) -> Closed | None:
        """How it closed (1000, its client's goodbye), or None while open."""
        return None if self._open else Closed(1000, "")

    async def open(self) -> None:
        """Nothing to open: a closed session is not reopened (``Closed``)."""
        if not self._open:
            raise Closed(1000, "")

    async def request(self, kind: str, data: Mapping[str, Any] | None = None, *, limit: int = 0) -> dict[str, Any]:
        """Play a ``reset`` or ``step`` frame and return the answer's data (``observation``, ``reward``, ``done``)."""
        del limit  # the engine in this process takes a step of any size
        if self._refused is not None:
            self._open = False
            raise self._refused
        await self.open()
        frame = json.loads(standard_json(dict(data or {})))  # refused as the transport refuses it
        running = self._running = asyncio.ensure_future(self._play(kind, frame))
        try:
            fields = await asyncio.shield(running)  # a deadline that expires leaves the call to abort()
        finally:
            if self._running is running and running.done():
                self._running = None
        reward, done = fields.pop("reward", None), bool(fields.pop("done", False))  # beside it, as OpenEnv sends them
        return {"observation": fields, "reward": reward, "done": done}

    async def _play(self, kind: str, frame: dict[str, Any]) -> dict[str, Any]:
        if kind == "reset":
            return await self._player.reset(**frame)
        if kind == "step":
            try:
                action = wire.Action.model_validate(frame)
            except ValueError as exc:
                raise ErrorFrame("VALIDATION_ERROR", f"not a step: {exc}", {}) from None
            return await self._player.step(action)
        raise ErrorFrame("UNKNOWN_TYPE", f"a frame of type {kind!r} is not played here (reset or step)", {})

    async def close(self) -> None:
        """End the session: its episode is torn down before this returns."""
        self._open = False
        try:
            await self._player.end_episode()
        finally:
            self._live.discard(self)

    def abort(self) -> None:
        """Drop the session now (its client stopped waiting): a call still running fails its episode as a lost
        connection and is cancelled; the teardown runs in the background."""
        self._open = False
        self._live.discard(self)
        running, self._running = self._running, None
        if running is not None and not running.done():
            self._player.abandon("connection_lost", "the client dropped the session while a call ran; it was cancelled")
            running.cancel()
        self._in_background(self._player.end_episode())

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # no loop (a session dropped outside one): nothing of it can run any more
            coro.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)
