"""``agentenv serve`` on a port that is taken says so, names --port, and never claims to be serving; the socket every
agentenv server listens on hands out connections with Nagle's algorithm off."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from agentenv_server.runner import listening_socket

from tests.support import INBOX


def test_a_port_in_use_is_refused_naming_port_before_any_serving_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agentenv.cli", "serve", str(INBOX), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert f"--port {port}: 127.0.0.1:{port} is already in use" in done.stderr
    assert "pick a free port with --port" in done.stderr
    assert "serving" not in done.stderr + done.stdout  # nothing claimed it was serving
    assert "Traceback" not in done.stderr and "Errno" not in done.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_listening_socket_hands_out_connections_with_nagle_off(host):
    # asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP; without it an HTTP answer written in two
    # parts waited for the client's delayed ACK (about 40 ms a Task API request on the asyncio loop)
    with listening_socket(host, 0) as listener:
        assert listener.proto == socket.IPPROTO_TCP
        listener.listen()
        with socket.create_connection(listener.getsockname()[:2]), listener.accept()[0] as accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
