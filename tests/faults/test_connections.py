"""Connections before they are sessions: half-sent and huge request heads, a handshake the server is slow to answer,
and TLS."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import ServerUnavailable

from tests.support import Ledger
from tests.support.faults import Matrix, play, public_address, run
from tests.support.procs import memory

TOKEN = "tok-0c3e9b1f57"
HALF_SENT = b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"  # no blank line: never finished


def _closed_by_server(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing ``sock`` (b"" when it reset or closed it unanswered), or None if it is
    still open after ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def test_half_sent_requests_are_cut_at_the_deadline_and_take_no_descriptor_a_session_needs(
    matrix: Matrix, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 256 descriptors: room for a few sessions; 180 strangers that never finish their request head, no token needed
    args = ("--token-var", "FAULTS_TOKEN", "--header-timeout", "3", "--max-concurrent-envs", "4")
    server = matrix.serve(*args, env={"FAULTS_TOKEN": TOKEN}, nofile=256)
    strangers = []
    for _ in range(180):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(HALF_SENT)
        strangers.append(sock)
    try:
        monkeypatch.setenv("FAULTS_TOKEN", TOKEN)
        trainer = Shared(server.url, token_var="FAULTS_TOKEN", reset_timeout=30)
        record = run(play(trainer, "proc-echo", [("echo", {"text": "sub"})], "sub"))
        assert matrix.saw(record).outcome == "scored", record.result  # not refused OUT_OF_RESOURCES
        ends = [_closed_by_server(sock, 15) for sock in strangers]
    finally:
        for sock in strangers:
            sock.close()
    assert None not in ends, f"{ends.count(None)} half-sent requests were still open after the deadline"
    assert any(end.startswith(b"HTTP/1.1 408") for end in ends if end)  # those that waited: told why
    code, stderr = server.terminate()
    assert code == 0 and "sent no whole request head" in stderr


def test_a_huge_request_head_is_refused_431_without_taking_its_size_in_memory(matrix: Matrix) -> None:
    server = matrix.serve()
    assert server.proc is not None
    before = memory(server.proc.pid, "VmHWM")
    line = b"X-Big: " + b"a" * (50 << 20) + b"\r\n"

    def send_one() -> None:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            try:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + line + b"\r\n")
            except OSError:  # the server closed it part-way: what this test wants
                pass

    senders = [threading.Thread(target=send_one) for _ in range(4)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(120)
    grew = memory(server.proc.pid, "VmHWM") - before
    with socket.create_connection(("127.0.0.1", server.port)) as sock:  # a head over 64 KiB, sent whole: told why
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * (100 << 10) + b"\r\n\r\n")
        answer = _closed_by_server(sock, 30)
    assert answer is not None and answer.startswith(b"HTTP/1.1 431"), answer
    assert grew < 50 << 20, f"the server grew by {grew >> 20} MiB for 4 heads of 50 MiB"
    assert run(play(Shared(server.url), "echo", [("echo", {"text": "ping"})], "ping")).result.reward == 1.0


@pytest.mark.parametrize("loop", ["auto"])  # the client's doing: the server only has to be slow
def test_a_handshake_may_take_what_reset_timeout_allows_and_a_late_one_is_told_overloaded(matrix: Matrix) -> None:
    server = matrix.serve()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)  # the kernel still takes connections; nothing answers them
    try:
        threading.Timer(35, server.proc.send_signal, args=(signal.SIGCONT,)).start()
        began = time.monotonic()
        patient = run(play(Shared(server.url, reset_timeout=60), "echo", [("echo", {"text": "ping"})], "ping"))
        waited = time.monotonic() - began
        server.proc.send_signal(signal.SIGSTOP)

        async def impatient() -> BaseException:
            try:
                await Session(Shared(server.url, reset_timeout=3)).start("echo")
            except ServerUnavailable as exc:
                return exc
            raise AssertionError("a stopped server started an episode")

        late = run(impatient())
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert matrix.saw(patient).reward == 1.0 and waited >= 30  # not cut at 30 s: reset_timeout is 60
    assert late.failure.kind == "overloaded", late  # type: ignore[attr-defined]
    assert "out of file descriptors" not in str(late).split("or, on asyncio")[0]
    assert "within 3 s" in str(late)


def _certificate(folder: Path) -> tuple[Path, Path]:
    key, cert = folder / "key.pem", folder / "cert.pem"
    names = "subjectAltName=DNS:localhost,IP:127.0.0.1"
    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*argv, "-days", "1", "-subj", "/CN=localhost", "-addext", names], check=True, capture_output=True)
    return key, cert


def test_tls_carries_the_token_and_every_frame_and_plain_http_is_not_served(
    matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = _certificate(tmp_path)
    tls = ("--ssl-keyfile", str(key), "--ssl-certfile", str(cert))
    server = matrix.serve(*tls, "--token-var", "FAULTS_TOKEN", env={"FAULTS_TOKEN": TOKEN}, scheme="https", verify=cert)
    monkeypatch.setenv("FAULTS_TOKEN", TOKEN)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate, as it would a CA's
    record = run(play(Shared(server.url, token_var="FAULTS_TOKEN"), "echo", [("echo", {"text": "ping"})], "ping"))
    assert server.url.startswith("https://") and matrix.saw(record).reward == 1.0
    with socket.create_connection(("127.0.0.1", server.port)) as sock:  # plain HTTP to the TLS port
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = _closed_by_server(sock, 30)
    assert answer is not None and b"200 OK" not in answer


def test_a_token_sent_in_clear_to_another_machine_is_warned_about_once(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = matrix.serve("--host", "0.0.0.0", "--token-var", "FAULTS_TOKEN", env={"FAULTS_TOKEN": TOKEN})
    monkeypatch.setenv("FAULTS_TOKEN", TOKEN)
    remote = Shared(f"http://{public_address()}:{server.port}", token_var="FAULTS_TOKEN")
    with caplog.at_level("WARNING", logger="agentenv"):
        for _ in range(3):
            assert matrix.saw(run(play(remote, "echo", [("echo", {"text": "ping"})], "ping"))).reward == 1.0
        run(play(Shared(server.url, token_var="FAULTS_TOKEN"), "echo", [("echo", {"text": "ping"})], "ping"))
    warned = [r.getMessage() for r in caplog.records if "in clear" in r.getMessage()]
    assert len(warned) == 1 and public_address() in warned[0] and "https://" in warned[0], warned
    assert TOKEN not in json.dumps(warned)
