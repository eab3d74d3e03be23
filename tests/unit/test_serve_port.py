"""``agentenv serve`` on a port that is taken says so, names --port, and never claims to be serving."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import INBOX


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
