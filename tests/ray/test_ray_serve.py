"""A bundle on Ray Serve: 2 replicas behind one address, on a local Ray on loopback.

The tests share one server (Ray takes tens of seconds to start here) and run in file order: the
last two kill a replica and shut everything down.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal

import httpx
import pytest
from agentenv.client.session import Session, Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import AtCapacity, EpisodeLost
from websockets.exceptions import InvalidStatus

from tests.support import alive, running, wait_until
from tests.support.ray import PER_REPLICA, TOKEN, TOKEN_VAR, RayServer, parent_of, starter_of
from tests.support.wire import open_ws

EPISODES = 64
AT_ONCE = 16  # sessions open at once, each playing EPISODES / AT_ONCE episodes in turn


def _deploys_by_replica(server: RayServer) -> collections.Counter[int]:
    """The fake python env runs in its replica's process: its ledger's deploy lines carry the replica's pid."""
    return collections.Counter(int(line.split()[1]) for line in server.ledger.path.read_text().splitlines()
                               if line.startswith("deploy "))  # fmt: skip


async def _play_echo(session: Session, word: str) -> float | None:
    await session.start("echo")
    await session.call("echo", {"text": word})
    answer = await session.end_turn(f"I said {word}")
    assert answer.result is not None and answer.result.outcome == "scored", answer.result
    return answer.result.reward


def test_64_episodes_spread_over_both_replicas_and_all_score(ray_server):
    shared = Shared(ray_server.url, token_var=TOKEN_VAR, waits_for_server=True, reset_timeout=120)

    async def player(n: int) -> list[float | None]:
        async with Session(shared) as session:
            return [await _play_echo(session, f"w{n}-{i}") for i in range(EPISODES // AT_ONCE)]

    async def main() -> list[float | None]:
        played = await asyncio.gather(*(player(n) for n in range(AT_ONCE)))
        return [reward for rewards in played for reward in rewards]

    rewards = asyncio.run(main())
    assert rewards == [1.0] * EPISODES
    by_replica = _deploys_by_replica(ray_server)
    assert sum(by_replica.values()) == EPISODES
    assert len(by_replica) == 2 and min(by_replica.values()) > 0, by_replica  # each replica served some


def test_the_token_is_enforced_and_health_is_open(ray_server):
    assert httpx.get(ray_server.url + "/health").status_code == 200
    refused = httpx.get(ray_server.url + "/fake/splits")
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert httpx.get(ray_server.url + "/fake/splits", headers={"Authorization": "Bearer nope"}).status_code == 401
    with pytest.raises(InvalidStatus) as no_token:
        open_ws(ray_server.url)
    assert no_token.value.response.status_code == 401
    with pytest.raises(InvalidStatus):
        open_ws(ray_server.url, token="nope")
    splits = httpx.get(ray_server.url + "/fake/splits", headers=ray_server.headers)
    assert [s["name"] for s in splits.json()] == ["train", "eval", "test"]


def test_the_task_api_answers_the_same_from_either_replica(ray_server):
    by_replica = ray_server.replicas_answering()
    assert len(by_replica) == 2, list(by_replica)
    bodies = {body for answers in by_replica.values() for body in answers}
    assert len(bodies) == 1
    assert {t["id"] for t in httpx.Response(200, content=bodies.pop()).json()["tasks"]} >= {"echo", "two-turn"}


def test_sessions_fill_every_replica_before_one_is_refused_and_the_refusal_names_the_fix(ray_server):
    # the router sends each session to the least busy replica; waiting for the server is the fallback for a
    # moment when its view is late (a replica slow to say how busy it is on this loaded machine)
    waiting = Shared(ray_server.url, token_var=TOKEN_VAR, reset_timeout=60, waits_for_server=True)
    held = []
    for _ in range(2 * PER_REPLICA):
        session = SyncSession(waiting)
        session.start("echo")
        held.append(session)
    try:
        with pytest.raises(AtCapacity) as full:  # without waiting, the refusal comes at once
            SyncSession(Shared(ray_server.url, token_var=TOKEN_VAR, reset_timeout=60)).start("echo")
        message = str(full.value)
        assert f"{PER_REPLICA}/{PER_REPLICA} sessions" in message
        assert "--replicas" in message and "--max-concurrent-envs" in message
    finally:
        for session in held:
            session.close()


def test_a_killed_replica_fails_its_episodes_which_replay_and_score_and_no_env_process_is_left(ray_server):
    shared = Shared(ray_server.url, token_var=TOKEN_VAR, waits_for_server=True, reset_timeout=120)
    ready, killed = asyncio.Event(), asyncio.Event()
    placed: dict[int, tuple[int, int, int]] = {}  # rollout -> its replica, its env program, the program's child

    async def rollout(n: int):
        async with Session(shared) as session:
            rollout = session.rollout("proc-echo", attempts=2)

            async def attempt(started):
                if rollout.record.attempts == 1:
                    [child] = running((await rollout.call("spawn", {})).text)
                    program = parent_of(child)
                    placed[n] = (starter_of(program), program, child)
                    if len(placed) == 6:
                        ready.set()
                    await killed.wait()
                assert (await rollout.call("echo", {"text": "sub"})).text == "sub"
                return await rollout.end_turn("sub")

            _, result = await rollout.play(attempt)
            return rollout.record, result

    async def main():
        plays = [asyncio.ensure_future(rollout(n)) for n in range(6)]  # least-busy routing uses both replicas
        await asyncio.wait_for(ready.wait(), 120)
        replicas = {replica for replica, _, _ in placed.values()}
        assert len(replicas) == 2, placed
        victim = min(replicas)
        os.kill(victim, signal.SIGKILL)  # like an OOM kill or a lost node: no teardown runs in the replica
        killed.set()
        return victim, await asyncio.gather(*plays)

    victim, played = asyncio.run(main())
    for n, (record, result) in enumerate(played):
        assert result.outcome == "scored" and result.reward == 1.0, (n, result)
        if placed[n][0] == victim:  # lost with the replica (never scored, never the policy's), replayed, scored
            assert record.attempts == 2 and len(record.failures) == 1, record
            assert record.failures[0].replayable and record.failures[0].fault != "policy", record
        else:  # the other replica's episodes never noticed
            assert record.attempts == 1 and record.failures == [], record
    # the dead replica's reaper killed the env programs it left, and their children
    gone = {pid for replica, program, child in placed.values() if replica == victim for pid in (program, child)}
    assert wait_until(lambda: not any(alive(pid) for pid in gone), 30, interval=0.2), (
        "the dead replica's env processes are gone"
    )
    # Serve replaced the replica: two replicas answer again
    assert wait_until(lambda: len(ray_server.replicas_answering()) == 2, 120, interval=0.2), (
        "Serve started a replacement replica"
    )


def test_sigterm_closes_every_session_tears_down_every_episode_and_leaves_no_process(ray_server):
    shared = Shared(ray_server.url, token_var=TOKEN_VAR, reset_timeout=60)
    sessions = []
    for _ in range(4):
        session = SyncSession(shared)
        session.start("proc-echo")
        session.call("spawn", {})
        sessions.append(session)
    python = SyncSession(shared)
    python.start("echo")
    python.call("echo", {"text": "up"})
    sessions.append(python)
    assert len(ray_server.leftovers()) > 5  # the server, Ray's processes, 2 replicas, their reapers, 4 programs
    before = ray_server.ledger.count("teardown")

    code, stderr = ray_server.terminate(timeout=120)

    assert code == 0, stderr
    # every open episode was torn down (each proc-echo program writes its own teardown line, and so does its env)
    assert ray_server.ledger.count("teardown") - before >= len(sessions)
    for session in sessions:
        with pytest.raises(EpisodeLost):
            session.call("echo", {"text": "gone?"})
    assert wait_until(lambda: not ray_server.leftovers(), 30, interval=0.2), "no process of this run is left"
    assert TOKEN not in stderr
    for path in ray_server.ray_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), path
