"""Fuzzing a real ``agentenv serve`` on both loops: ``/ws`` frames, Task API requests and raw bytes on its port.

Each input asserts the protocol's promises: the server never exits and stays under its memory bound; every frame but
a ``close`` gets exactly one answer (an observation, a state or an error frame) and the session goes on (a ``state``
request after the last frame is answered on the same connection); every HTTP request gets an answer that is not a
server error (5xx); bytes that are not HTTP never take the server down.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.fuzz.strategies import frames, is_close, requests
from tests.support.fuzz import FuzzServer, Report
from tests.support.wire import ws_url

ANSWER_SECONDS = 60


def _answer(ws: Any) -> dict[str, Any]:
    raw = ws.recv(timeout=ANSWER_SECONDS)
    assert isinstance(raw, str), f"a binary answer: {raw[:100]!r}"
    frame = json.loads(raw)
    assert frame.get("type") in ("observation", "state", "error"), frame
    return frame


@given(st.lists(frames(), min_size=1, max_size=6))
def test_every_frame_is_answered_and_the_session_goes_on(
    fuzz_server: FuzzServer, fuzz_report: Report, sequence: list[tuple[str, str | bytes]]
) -> None:
    fuzz_report.tried.update(f"ws {kind} frame" for kind, _ in sequence)
    with connect(ws_url(fuzz_server.url), open_timeout=ANSWER_SECONDS, max_size=None) as ws:
        for i, (_, payload) in enumerate(sequence):
            ws.send(payload)
            if is_close(payload):
                try:
                    _answer(ws)  # a close that does not validate is answered; one that does ends the session
                except ConnectionClosed:
                    fuzz_server.check("a close frame")
                    return
                continue
            try:
                _answer(ws)
            except ConnectionClosed as closed:
                fuzz_report.sessions_lost.append(f"{fuzz_server.loop}: {payload[:200]!r} ({closed})")
                fuzz_server.check(f"frame {i}")
                raise AssertionError(f"the server ended the session after {payload[:300]!r}: {closed}") from None
        ws.send(json.dumps({"type": "state"}))
        assert _answer(ws)["type"] == "state"  # the same session, still served
    fuzz_server.check("a frame sequence")


@given(requests())
def test_every_task_api_request_is_answered_without_a_server_error(
    fuzz_server: FuzzServer, fuzz_report: Report, request: dict[str, Any]
) -> None:
    fuzz_report.tried["http request"] += 1
    try:
        response = httpx.request(
            request["method"],
            fuzz_server.url + request["path"],
            headers=request["headers"],
            content=request["body"],
            timeout=ANSWER_SECONDS,
        )
    except httpx.RemoteProtocolError:  # the server closed a request it would not parse (400 first, or not)
        fuzz_server.check(f"{request['method']} {request['path']}")
        return
    except (httpx.InvalidURL, httpx.LocalProtocolError):  # the client would not send it
        return
    assert response.status_code < 500, (request, response.status_code, response.text[:500])
    fuzz_server.check(f"{request['method']} {request['path']}")


@given(st.binary(min_size=1, max_size=2000) | st.text(max_size=500).map(str.encode))
def test_bytes_that_are_not_http_never_take_the_server_down(
    fuzz_server: FuzzServer, fuzz_report: Report, data: bytes
) -> None:
    fuzz_report.tried["raw bytes"] += 1
    with socket.create_connection(("127.0.0.1", fuzz_server.process.port), timeout=ANSWER_SECONDS) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass
    fuzz_server.check(f"raw bytes {data[:60]!r}")
    assert httpx.get(fuzz_server.url + "/health", timeout=ANSWER_SECONDS).status_code == 200
