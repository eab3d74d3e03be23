"""What an operator runs into: waiting for a server within reset_timeout, access logs with the token kept out of
them whole, HEAD /health, threads that do not grow with sessions."""

from __future__ import annotations

import io
import logging
import threading
import time

import httpx
import pytest
from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.client.taskapi import read_tasks
from agentenv.errors import ServerUnavailable
from agentenv_server import ServerThread, build_app
from agentenv_server.runner import redact_token

from tests.support import FAKE, free_port

TOKEN = "tok-8d2e61b0c4"


def _serve_later(port: int, seconds: float) -> list[ServerThread]:
    started: list[ServerThread] = []
    threading.Timer(seconds, lambda: started.append(ServerThread(build_app(FAKE), port=port).start())).start()
    return started


@pytest.mark.parametrize("client", ["read_tasks", "session"])
def test_waits_for_server_waits_out_a_server_that_comes_up_within_reset_timeout(client: str) -> None:
    port = free_port()
    started = _serve_later(port, 1.5)
    shared = Shared(f"http://127.0.0.1:{port}", waits_for_server=True, reset_timeout=30)
    try:
        if client == "read_tasks":
            assert [r.id for r in read_tasks(shared, "eval")] == ["eval-echo"]
        else:
            session = SyncSession(shared)
            assert session.start("echo").task_id == "echo"
            session.close()
    finally:
        for server in started:
            server.stop()


@pytest.mark.parametrize("client", ["read_tasks", "session"])
def test_waits_for_server_gives_up_at_reset_timeout_and_its_warning_does_not_tell_to_set_it(
    client: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    shared = Shared(f"http://127.0.0.1:{free_port()}", waits_for_server=True, reset_timeout=3)
    began = time.monotonic()
    with pytest.raises(ServerUnavailable) as gone:
        if client == "read_tasks":
            read_tasks(shared, "train")
        else:
            SyncSession(shared).start("echo")
    waited = time.monotonic() - began
    assert waited >= 3  # the whole reset_timeout, not a backoff step short of it (3.2 s of 5 before)
    assert "waited 3 s" in str(gone.value)
    waits = [r.getMessage() for r in caplog.records if "waiting for the agentenv server" in r.getMessage()]
    assert waits and "(up to reset_timeout=3 s)" in waits[0]
    assert not any("waits_for_server=True" in w for w in waits)  # it is set: the hint is for those who did not


def test_the_token_is_redacted_from_uvicorns_logs_and_every_line_stays_whole() -> None:
    from uvicorn.logging import AccessFormatter, DefaultFormatter

    app = build_app(FAKE, token=TOKEN)
    access, debug = io.StringIO(), io.StringIO()
    handlers = {"uvicorn.access": logging.StreamHandler(access), "uvicorn.error": logging.StreamHandler(debug)}
    handlers["uvicorn.access"].setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s'))
    handlers["uvicorn.error"].setFormatter(DefaultFormatter("%(message)s"))
    for name, handler in handlers.items():
        logging.getLogger(name).addHandler(handler)
    try:
        redact_token(app)
        # uvicorn's access record: its formatter unpacks these five arguments (an empty tuple broke every line)
        logging.getLogger("uvicorn.access").warning(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/fake/splits?t={TOKEN}", "1.1", 200
        )
        logging.getLogger("uvicorn.error").warning("headers %r", [(b"authorization", f"Bearer {TOKEN}".encode())])
    finally:
        for name, handler in handlers.items():
            logging.getLogger(name).removeHandler(handler)
    assert access.getvalue() == '127.0.0.1:5 - "GET /fake/splits?t=<token> HTTP/1.1" 200 OK\n'
    assert "<token>" in debug.getvalue() and TOKEN not in debug.getvalue()


def test_head_health_answers_200_without_the_token_and_nothing_else_does(serve) -> None:
    server = serve(FAKE, token=TOKEN)
    assert httpx.head(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.head(server.url + "/agentenv").status_code == 401


def test_sessions_share_one_thread_instead_of_one_each(serve) -> None:
    server = serve(FAKE, max_concurrent_envs=40)
    before = threading.active_count()
    sessions = [SyncSession(Shared(server.url)) for _ in range(30)]
    try:
        for session in sessions:
            session.start("echo")
            session.call("noop_sync", {})  # a sync tool: the pool's thread, not a thread of the session's own
        grown = threading.active_count() - before
    finally:
        for session in sessions:
            session.close()
    assert grown <= 4, f"{grown} threads for 30 sessions"  # OpenEnv's one shared session thread, the pool's few
