"""Openings in a sandbox without network: the host's end of a relay of one loopback endpoint.

A program that must reach its model proxy or its MCP server (``agentenv.sandbox.Opening``) runs behind
``_relay.py``, which listens on the same ``127.0.0.1:PORT`` inside the sandbox's own network namespace and passes
each connection to a unix socket in a folder the sandbox reads; here, ``Relays`` accepts on that socket and
connects to the host's ``host:port``. So the program reaches that endpoint and nothing else of the host's network.

An opening with a ``key`` is bound to it: while a relayed connection is open, ``relayed_key`` tells the endpoint
(served in this process: the capture proxy) which key the sandbox behind it was given, so a rollout that came by
another rollout's key cannot write its calls into that rollout's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from agentenv.sandboxing import Opening

__all__ = ["RELAY", "Relays", "relayed_argv", "relayed_key"]

RELAY = Path(__file__).with_name("_relay.py")
_KEYS: dict[int, str] = {}  # the local port of each open relayed connection of a keyed opening -> its key


def relayed_key(port: int) -> str | None:
    """The key the sandbox behind the relayed loopback connection from local ``port`` was given for its
    endpoint; None when that connection is not a keyed opening's (the trainer's own, an unsandboxed agent's)."""
    return _KEYS.get(port)


class Relays:
    """The host's ends of a sandbox's openings: one unix socket per opening in ``folder``, served on this loop."""

    def __init__(self, openings: tuple[Opening, ...], folder: Path) -> None:
        self.openings = openings
        self.folder = folder
        self._servers: list[asyncio.AbstractServer] = []
        self._pumps: set[asyncio.Task[None]] = set()

    def socket(self, opening: Opening) -> Path:
        return self.folder / f"{opening.port}.sock"

    async def start(self) -> None:
        """Listen on each opening's unix socket."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for opening in self.openings:
            path = self.socket(opening)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

            async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Opening = opening):
                task = asyncio.ensure_future(_forward(reader, writer, o))
                self._pumps.add(task)
                task.add_done_callback(self._pumps.discard)

            self._servers.append(await asyncio.start_unix_server(accepted, path=str(path)))

    async def close(self) -> None:
        """Stop listening and end every relayed connection."""
        for server in self._servers:
            server.close()
        for task in list(self._pumps):
            task.cancel()
        self._servers.clear()


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, opening: Opening) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(opening.host, opening.port)
    except OSError:
        writer.close()
        return
    port = up_writer.get_extra_info("sockname")[1]
    if opening.key is not None:
        _KEYS[port] = opening.key  # before any of the sandbox's bytes go up
    try:
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
    finally:
        _KEYS.pop(port, None)  # before the port is free to be another connection's
        for w in (writer, up_writer):
            w.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


def relayed_argv(argv: tuple[str, ...], relays: Relays) -> tuple[str, ...]:
    """``argv`` behind the sandbox's end of ``relays`` (``_relay.py``)."""
    specs = [f"{o.port}={relays.socket(o)}" for o in relays.openings]
    return (os.path.realpath(sys.executable), "-I", "-S", str(RELAY), *specs, "--", *argv)
