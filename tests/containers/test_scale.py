"""Many container episodes on one server: 32 at once, and 16 running when the server is SIGKILLed."""

from __future__ import annotations

import asyncio
from typing import Any

from agentenv.client.rollout import RolloutRecord
from agentenv.client.session import Session
from agentenv.client.settings import Shared

from tests.support import ServeProcess
from tests.support.containers import BOX, of_process, wait_until_none

AT_ONCE = 32
KILLED_WITH = 16


async def hold(shared: Shared, count: int, holding: Any, *, attempts: int = 1) -> list[RolloutRecord]:
    """``count`` rollouts of notes-1 at once, each playing the reference solution; the first attempts wait after
    their first tool answer until ``holding()`` returns (every container up at the same time)."""
    gate = asyncio.Event()
    ready: list[int] = []

    async def one(i: int) -> RolloutRecord:
        session = Session(shared)
        rollout = session.rollout("notes-1", attempts=attempts)

        async def attempt(started: Any) -> None:
            assert (await rollout.call("read_note", {"key": "code"})).text == "4217"
            if rollout.record.attempts == 1:
                ready.append(i)
                await gate.wait()
            await rollout.end_turn("4217")
            await rollout.call("read_note", {"key": "city"})
            await rollout.end_turn("Lisbon")

        try:
            _, rollout.record.result = await rollout.play(attempt)
        finally:
            await session.close()
        return rollout.record

    playing = [asyncio.ensure_future(one(i)) for i in range(count)]
    while len(ready) < count:
        await asyncio.sleep(0.1)
        assert not any(p.done() for p in playing), [p.result() for p in playing if p.done()]
    await holding()
    gate.set()
    return await asyncio.gather(*playing)


def test_32_container_episodes_run_at_once_on_one_server(images: str) -> None:
    server = ServeProcess(BOX, "--max-concurrent-envs", str(AT_ONCE + 8)).start(timeout=180)
    assert server.proc is not None
    running: list[int] = []

    async def count() -> None:
        running.append(len(await asyncio.to_thread(of_process, server.proc.pid)))  # type: ignore[union-attr]

    try:
        shared = Shared(server.url, reset_timeout=600, tool_timeout=300)
        records = asyncio.run(hold(shared, AT_ONCE, count))
        left = wait_until_none(server.proc.pid)
    finally:
        server.terminate()
    assert running == [AT_ONCE]
    assert [r.result.reward for r in records] == [1.0] * AT_ONCE
    assert sum(len(r.failures) for r in records) == 0
    assert left == {}


def test_a_sigkilled_server_with_16_containers_leaves_none_and_its_clients_replay_after_restart(images: str) -> None:
    server = ServeProcess(BOX, "--max-concurrent-envs", str(KILLED_WITH + 8)).start(timeout=180)
    assert server.proc is not None
    pid = server.proc.pid
    seen: dict[str, Any] = {}

    async def kill_and_restart() -> None:
        seen["before"] = len(await asyncio.to_thread(of_process, pid))
        await asyncio.to_thread(server.kill)  # SIGKILL: no teardown runs
        seen["left"] = await asyncio.to_thread(wait_until_none, pid, 60.0)
        restarted = ServeProcess(BOX, "--max-concurrent-envs", str(KILLED_WITH + 8), port=server.port)
        seen["again"] = await asyncio.to_thread(restarted.start, 180.0)

    shared = Shared(server.url, waits_for_server=True, reset_timeout=600, tool_timeout=300)
    try:
        records = asyncio.run(hold(shared, KILLED_WITH, kill_and_restart, attempts=3))
        again = seen["again"]
        after = wait_until_none(again.proc.pid)
    finally:
        if "again" in seen:
            seen["again"].terminate()
    assert seen["before"] == KILLED_WITH
    assert seen["left"] == {}  # the reaper removed every container, volume and network of the killed server
    assert [r.result.reward for r in records] == [1.0] * KILLED_WITH  # each replayed on the restarted server
    assert all(r.attempts == 2 for r in records)
    assert after == {}
