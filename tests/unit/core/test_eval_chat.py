"""``ChatClient`` (agentenv eval's model client) on a scripted raw HTTP server: timeouts, dropped connections, the
connection pool's queue and the proxy settings of the environment."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agentenv.evaluate import chat
from agentenv.evaluate.chat import ChatClient, Endpoint, EndpointError

ANSWER = json.dumps({"choices": [{"message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}]})
MESSAGES = [{"role": "user", "content": "6 times 7?"}]

# what the server does with the n-th request (1-based): the writer is the connection's
Handler = Callable[[int, bytes, asyncio.StreamWriter], Awaitable[None]]


def respond(writer: asyncio.StreamWriter, body: str = ANSWER, status: int = 200) -> None:
    data = body.encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    writer.write(head.encode() + data)


class Server:
    """A loopback HTTP/1.1 server that reads each request whole and hands it to ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length")), 0)
                await reader.readexactly(length)
                self.requests.append(head)
                await self.handler(len(self.requests), head, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(coroutine: Awaitable[Any]) -> Any:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


async def complete(url: str, **options: Any) -> str:
    client = ChatClient(Endpoint(url, "m", **options))
    try:
        return (await client.complete(MESSAGES, [])).content
    finally:
        await client.aclose()


def test_a_connection_dropped_after_an_answer_is_retried():
    async def handler(n: int, head: bytes, writer: asyncio.StreamWriter) -> None:
        if n == 2:
            writer.transport.abort()  # mid-run, the server restarts
        else:
            respond(writer)

    async def play() -> tuple[str, str, int]:
        async with Server(handler) as server:
            client = ChatClient(Endpoint(f"http://127.0.0.1:{server.port}/v1", "m"))
            try:
                first = (await client.complete(MESSAGES, [])).content
                second = (await client.complete(MESSAGES, [])).content
            finally:
                await client.aclose()
            return first, second, len(server.requests)

    assert run(play()) == ("42", "42", 3)


def test_an_endpoint_that_never_answers_names_the_request_timeout(monkeypatch):
    monkeypatch.setattr(chat, "RETRIES", 2)

    async def handler(n: int, head: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async def play() -> None:
        async with Server(handler) as server:
            await complete(f"http://127.0.0.1:{server.port}/v1", timeout=0.2)

    with pytest.raises(EndpointError, match=r"did not answer within --request-timeout=0\.2 s, 2 times") as caught:
        run(play())
    assert caught.value.kind == "unavailable"


def test_requests_past_the_pool_wait_for_a_connection_without_failing():
    in_flight, most = 0, 0

    async def handler(n: int, head: bytes, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.1)
        in_flight -= 1
        respond(writer)

    async def play() -> list[str]:
        async with Server(handler) as server:
            # each waits up to 5 x 0.1 s in the queue, longer than the endpoint's timeout: only the answer is timed
            client = ChatClient(Endpoint(f"http://127.0.0.1:{server.port}/v1", "m", timeout=0.3), connections=2)
            try:
                answers = await asyncio.gather(*(client.complete(MESSAGES, []) for _ in range(10)))
            finally:
                await client.aclose()
            return [a.content for a in answers]

    assert run(play()) == ["42"] * 10
    assert most == 2


def test_a_remote_endpoint_goes_through_the_environment_s_proxy_and_a_loopback_one_does_not(monkeypatch):
    async def handler(n: int, head: bytes, writer: asyncio.StreamWriter) -> None:
        respond(writer)

    async def play() -> tuple[bytes, bytes]:
        async with Server(handler) as proxy, Server(handler) as direct:
            for name in ("HTTP_PROXY", "http_proxy"):  # the lower-case one wins where both are set
                monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            assert await complete("http://model.example:8000/v1") == "42"  # resolved by the proxy only
            assert await complete(f"http://127.0.0.1:{direct.port}/v1") == "42"
            return proxy.requests[0], direct.requests[0]

    proxied, direct = run(play())
    assert proxied.startswith(b"POST http://model.example:8000/v1/chat/completions ")
    assert direct.startswith(b"POST /v1/chat/completions ")


def test_the_api_key_goes_in_the_authorization_header(monkeypatch):
    monkeypatch.setenv("CHAT_KEY", "k-1")

    async def handler(n: int, head: bytes, writer: asyncio.StreamWriter) -> None:
        respond(writer)

    async def play() -> bytes:
        async with Server(handler) as server:
            await complete(f"http://127.0.0.1:{server.port}/v1", api_key_var="CHAT_KEY")
            return server.requests[0]

    assert b"\r\nauthorization: bearer k-1\r\n" in run(play()).lower()
