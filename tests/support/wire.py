"""Raw WebSocket helpers for the server tests: frames exactly as a client would send them."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any
from urllib.parse import urlparse

from websockets.sync.client import connect


def ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://") + "/ws"


def open_ws(http_url: str, token: str | None = None, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return connect(ws_url(http_url), additional_headers=headers, open_timeout=10, **kwargs)


def reset_data(**fields: Any) -> dict[str, Any]:
    """A reset frame's data as agentenv's client sends it (with its protocol version)."""
    from agentenv.wire import PROTOCOL

    return {"protocol": PROTOCOL, **fields}


def ask(ws: Any, message: Any, *, raw: bool = False) -> dict[str, Any]:
    """Send one frame, return the answer frame."""
    ws.send(message if raw else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def half_open(http_url: str, first_message: dict[str, Any], *, timeout: float | None = None) -> socket.socket:
    """A client that completes the handshake, sends one frame, then never reads or answers again.

    Like a peer whose machine vanished: the socket stays open on our side, but nobody answers pings.
    ``timeout`` bounds the connect and the handshake (``TimeoutError``: nobody answered).
    """
    parsed = urlparse(http_url)
    sock = socket.create_connection((parsed.hostname, parsed.port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: {parsed.hostname}:{parsed.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert b" 101 " in head.split(b"\r\n", 1)[0], head
    payload = json.dumps(first_message).encode()
    mask = os.urandom(4)
    header = bytes([0x81])  # FIN + text frame
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    else:
        header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    sock.settimeout(None)
    return sock
