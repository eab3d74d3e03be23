"""Pooled sessions: a rollout reuses the session a finished one gave back; a lost or broken one is not reused."""

from __future__ import annotations

import asyncio

from agentenv.client.pool import pooled
from agentenv.client.settings import Shared

from tests.support import FAKE


def _sessions(server) -> int:
    return server.server.config.app.state.openenv.active_sessions


async def _play(shared: Shared, task: str, reply: str) -> str:
    async with pooled(shared) as session:
        rollout = session.rollout(task)

        async def attempt(started):
            if task == "echo":
                await rollout.call("echo", {"text": "ping"})
            await rollout.end_turn(reply)

        try:
            _, result = await rollout.play(attempt)
        except Exception as exc:  # a lost rollout: the pool must not keep its session
            return type(exc).__name__
        return result.outcome


async def test_rollouts_one_after_another_share_one_session(serve, ledger):
    server = serve(FAKE)
    shared = Shared(server.url)
    outcomes = [await _play(shared, "echo", "ping") for _ in range(3)]
    assert outcomes == ["scored"] * 3
    assert ledger.count("deploy") == 3  # an episode each
    assert _sessions(server) == 1  # on one session: one handshake, one server-side setup


async def test_a_lost_rollout_gives_back_no_session(serve):
    server = serve(FAKE, tool_timeout=1, reset_timeout=1)
    shared = Shared(server.url, tool_timeout=1, reset_timeout=1)
    assert await _play(shared, "echo", "ping") == "scored"
    assert await _play(shared, "deploy-fails", "x") == "RolloutFailed"
    await asyncio.sleep(0.5)
    assert _sessions(server) == 0  # the lost rollout's session was closed, not kept (it was the kept one)
    assert await _play(shared, "echo", "ping") == "scored"


async def test_a_pooled_session_the_server_reaped_reconnects(serve):
    server = serve(FAKE, idle_timeout=0.3)
    shared = Shared(server.url)
    assert await _play(shared, "echo", "ping") == "scored"
    await asyncio.sleep(1.5)  # the idle reaper closes the kept session
    assert await _play(shared, "echo", "ping") == "scored"
