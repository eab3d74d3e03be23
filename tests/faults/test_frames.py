"""What arrives on the wire: malformed frames, oversized ones, a wrong token, and sockets whose peer vanished."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from agentenv.errors import Unauthorized
from agentenv.settings import Shared
from agentenv.sync import SyncSession
from websockets.exceptions import ConnectionClosed

from tests.conftest import Ledger
from tests.faults.conftest import Matrix, play, run
from tests.unit.server_helpers import ask, half_open, open_ws, reset_data

TOKEN = "tok-51f0c2aa9e"


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _call(args: dict[str, object]) -> str:
    return json.dumps({"type": "step", "data": {"op": "call", "tool": "echo", "args": args}})


BAD_FRAMES = {
    "a number": ("42", "BAD_FRAME"),
    "an array": ("[]", "BAD_FRAME"),
    "null": ("null", "BAD_FRAME"),
    "a string": ('"reset"', "BAD_FRAME"),
    "a binary frame": (b'{"type": "reset"}', "BAD_FRAME"),
    "JSON nested past Python's parser": (_deep(100_000), "BAD_FRAME"),
    "a call nested 150 deep": (_call({"text": json.loads(_deep(150))}), "BAD_FRAME"),
    "not JSON": ("{not json", "INVALID_JSON"),
    "over max_message_bytes": (_call({"text": "x" * 300_000}), "MESSAGE_TOO_LARGE"),
}


def test_every_malformed_frame_gets_an_error_frame_and_the_session_goes_on(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve("--max-message-bytes", "200000")
    answers = {}
    with open_ws(server.url, max_size=None) as ws:
        started = ask(ws, {"type": "reset", "data": reset_data(task_id="echo")})
        assert started["data"]["observation"]["event"] == "started"
        for name, (frame, _) in BAD_FRAMES.items():
            ws.send(frame)
            answers[name] = json.loads(ws.recv(timeout=30))
        echoed = ask(ws, {"type": "step", "data": {"op": "call", "tool": "echo", "args": {"text": "ping"}}})
        ended = ask(ws, {"type": "step", "data": {"op": "end_turn", "reply": "ping"}})
    for name, (_, code) in BAD_FRAMES.items():
        assert answers[name]["type"] == "error" and answers[name]["data"]["code"] == code, (name, answers[name])
        assert "session goes on" in answers[name]["data"]["message"] or code == "INVALID_JSON", answers[name]
    assert echoed["data"]["observation"]["text"] == "ping"  # the same session, the same episode
    assert ended["data"]["observation"]["result"]["reward"] == 1.0
    assert ledger.count("deploy") == 1
    code, stderr = server.terminate()
    assert code == 0 and "Traceback" not in stderr


def test_a_frame_over_the_frame_limit_ends_the_connection_with_1009_and_its_episode_is_torn_down(
    matrix: Matrix, ledger: Ledger
) -> None:
    server = matrix.serve("--max-message-bytes", "100000", "--max-frame-bytes", "1000000")
    with open_ws(server.url, max_size=None) as ws:
        ask(ws, {"type": "reset", "data": reset_data(task_id="echo")})
        ws.send(_call({"text": "x" * 2_000_000}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # "message too big", documented
    assert ledger.wait_for("teardown", 1) == 1
    code, stderr = server.terminate()
    assert code == 0 and "Traceback" not in stderr


def test_a_wrong_token_fails_at_once_and_the_token_never_reaches_the_log_which_stays_whole(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = matrix.serve("--token-var", "FAULTS_TOKEN", "--log-level", "debug", env={"FAULTS_TOKEN": TOKEN})
    monkeypatch.setenv("FAULTS_WRONG", "not-the-token")
    monkeypatch.setenv("FAULTS_TOKEN", TOKEN)
    began = time.monotonic()
    with pytest.raises(Unauthorized, match=r"\$FAULTS_WRONG"):
        SyncSession(Shared(server.url, token_var="FAULTS_WRONG", waits_for_server=True, reset_timeout=60)).start("echo")
    assert time.monotonic() - began < 30  # refused, not waited out like a restart
    # a token in a URL reaches uvicorn's access log: the line is kept, the token is not
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server.url}/fake/splits?echo={TOKEN}", headers=headers).status_code == 200
    record = run(play(Shared(server.url, token_var="FAULTS_TOKEN"), "echo", [("echo", {"text": "ping"})], "ping"))
    assert matrix.saw(record).reward == 1.0
    code, stderr = server.terminate()
    assert code == 0
    assert TOKEN not in stderr
    assert TOKEN not in server.stdout  # uvicorn's access log
    assert "--- Logging error ---" not in stderr + server.stdout and "Traceback" not in stderr
    assert '"GET /fake/splits?echo=<token> HTTP/1.1" 200' in server.stdout  # the access line, whole


def test_a_half_open_socket_is_reaped_its_episode_torn_down_and_its_slot_freed(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve("--ping-interval", "0.5", "--idle-timeout", "3600", "--max-concurrent-envs", "1")
    sock = half_open(server.url, {"type": "reset", "data": reset_data(task_id="echo")})
    try:
        assert ledger.wait_for("deploy", 1) == 1
        assert ledger.wait_for("teardown", 1, timeout=30) == 1  # the peer never answered a ping
        record = run(play(Shared(server.url, waits_for_server=True, reset_timeout=30), "echo",
                          [("echo", {"text": "ping"})], "ping"))  # fmt: skip
    finally:
        sock.close()
    assert matrix.saw(record).reward == 1.0  # the one slot was given back
    assert matrix.lost == 0 and matrix.failures_scored == 0
