"""The capture proxy and the episode's MCP server as the harness serves them: nobody but the trainer reads a
rollout, nobody but its solver spends it, nobody but its solver reaches the episode's tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from agentenv.engine.agentproc import AgentDirs, AgentProcess
from agentenv.engine.agents import Launch
from agentenv.sandbox import Opening
from agentenv.wire import Tool
from agentenv_harness.capture import CaptureProxy
from agentenv_harness.mcp import ToolServer

from tests.support.harness import Engine

CHAT = {"model": "whatever-the-agent-says", "messages": [{"role": "user", "content": "What is 6 times 7?"}]}


@pytest.fixture
def proxy(engine: Engine):
    served = CaptureProxy(engine.url, "tiny/policy")
    yield served
    served.stop()


async def open_session(proxy: CaptureProxy) -> str:
    async with httpx.AsyncClient(timeout=60) as http:
        return await proxy.open(http, model="tiny/policy")


async def test_the_session_routes_need_the_admin_key(proxy):
    key = await open_session(proxy)
    for method, path in (("GET", "/sessions"), ("GET", f"/sessions/{key}/rollout"), ("POST", "/sessions"),
                         ("GET", f"/sessions/{key}/trace_entries"), ("DELETE", f"/sessions/{key}")):  # fmt: skip
        for headers in ({}, {"Authorization": f"Bearer {key}"}):  # no key, or a rollout's key
            response = httpx.request(method, proxy.url + path, headers=headers, json={} if method == "POST" else None)
            assert response.status_code == 401, (method, path, headers)
    assert httpx.get(proxy.url + "/sessions", headers=proxy.admin_headers).status_code == 200


async def test_a_model_call_needs_a_rollouts_key_and_lands_in_that_rollout_only(proxy, engine):
    first, second = await open_session(proxy), await open_session(proxy)
    refused = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer ak-guess"})
    answered = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {first}"},
                          timeout=60)  # fmt: skip
    assert refused.status_code == 401 and "unknown API key" in refused.text
    assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"] == "The answer is 42."
    assert (proxy.calls(first), proxy.calls(second)) == (1, 0)
    assert engine.chats()[-1]["model"] == "tiny/policy"  # the proxy sent the pinned name, not the agent's
    [turn] = proxy.trace(first).turns
    assert len(turn.per_token_logps) == len(turn.completion_token_ids) == sum(turn.loss_mask) > 0


CALL_WITH = """
import json, sys, urllib.error, urllib.request
for key in sys.argv[2:]:
    request = urllib.request.Request(sys.argv[1], json.dumps({chat}).encode(),
                                     {{"Authorization": "Bearer " + key, "Content-Type": "application/json"}})
    try:
        print(key[:6], urllib.request.urlopen(request, timeout=60).status)
    except urllib.error.HTTPError as exc:
        print(key[:6], exc.code, exc.read().decode())
"""


async def test_a_sandboxed_solver_cannot_spend_another_rollouts_key(proxy, tmp_path: Path):
    # rollout B came by rollout A's key (a transcript, a log): through B's sandbox, whose relay to the proxy is bound
    # to B's key, A's key (and the admin key) are refused, and nothing lands in A's trace
    theirs, mine = await open_session(proxy), await open_session(proxy)
    admin = proxy.admin_headers["Authorization"].removeprefix("Bearer ")
    url = f"{proxy.url}/v1/chat/completions"
    program = CALL_WITH.format(chat=repr(CHAT))
    launch = Launch(argv=(sys.executable, "-c", program, url, theirs, admin, mine), env={})
    opening = Opening(urlparse(proxy.url).port or 0, "127.0.0.1", mine)
    exit_ = await AgentProcess(launch, AgentDirs(tmp_path / "agent"), openings=(opening,)).run()
    lines = exit_.output.splitlines()
    assert exit_.code == 0, exit_.output
    assert lines[0].startswith(f"{theirs[:6]} 403 "), exit_.output
    refusal = json.loads(lines[0].split(" ", 2)[2])  # agentenv's one refusal: JSON naming the fix, and its code
    assert refusal["code"] == "FOREIGN_KEY", refusal
    assert refusal["detail"].startswith("this API key was not given to this sandbox"), refusal
    assert lines[1].startswith(f"{admin[:6]} 403 "), exit_.output
    assert lines[2] == f"{mine[:6]} 200", exit_.output
    assert (proxy.calls(theirs), proxy.calls(mine)) == (0, 1)


async def test_the_episodes_mcp_server_needs_its_bearer_token():
    loop = asyncio.new_event_loop()
    calls: list[tuple[str, dict]] = []

    async def call(name: str, args: dict) -> tuple[str, bool]:
        calls.append((name, args))
        return "42", False

    import threading

    threading.Thread(target=loop.run_forever, daemon=True).start()
    tools = [Tool("multiply", "Multiply two numbers.", {"type": "object", "properties": {"a": {"type": "number"}}})]
    server = ToolServer(tools, call, loop)
    mcp = server.start()
    try:
        from fastmcp import Client
        from fastmcp.client.auth import BearerAuth

        async def use(token: str) -> str:
            async with Client(mcp.url, auth=BearerAuth(token)) as client:
                result = await client.call_tool("multiply", {"a": 6})
                return result.content[0].text

        assert (await use(mcp.token)) == "42"
        with pytest.raises(Exception, match="401"):
            await use("not-the-token")
        assert httpx.post(mcp.url, json={}).status_code == 401
    finally:
        server.stop()
        loop.call_soon_threadsafe(loop.stop)
    assert calls == [("multiply", {"a": 6})]
