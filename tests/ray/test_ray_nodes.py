"""Past one machine: a bundle on a Ray cluster of two nodes (``ray.cluster_utils.Cluster``: two raylets on this host).

The replicas are placed one per node, sessions reach both, and a node removed mid-rollout (its raylet and every
process it ran killed, as a lost machine is) fails its episodes as the env's doing: they are played again on the
other node and scored, never trained on as a zero, and the application keeps serving. Both nodes' Serve proxies
listen on this host's one port, so a session may also reach the head's replica through the lost node's proxy, and
be lost with it (and replayed) like one whose replica was there: as a session through a lost machine's proxy is.
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from agentenv.client.session import Session, Shared

from tests.support import Ledger
from tests.support.ray import RUN_VAR, TOKEN, TOKEN_VAR, RayServer, parent_of

MOST = 8  # rollouts held open at most, to have one on each node


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await asyncio.sleep(0.05)


@pytest.fixture
def two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A head and a worker node of one CPU each, on loopback; everything they run carries this test's marker."""
    from ray.cluster_utils import Cluster

    ray_dir = Path(tempfile.mkdtemp(prefix="an-", dir="/tmp"))  # short: Ray's socket paths have a limit
    # Ray's token auth off: Cluster's in-process client reads the mode once, when this process first loaded Ray
    env = {
        **{RUN_VAR: uuid.uuid4().hex, "RAY_TMPDIR": str(ray_dir), "RAY_USAGE_STATS_ENABLED": "0"},
        **{"AGENTENV_FAKE_LEDGER": str(tmp_path / "ledger.txt"), TOKEN_VAR: TOKEN, "RAY_AUTH_MODE": "disabled"},
    }
    for name, value in env.items():  # the nodes' processes are started from this process, with its environment
        monkeypatch.setenv(name, value)
    node = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    worker = cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
    cluster.wait_for_nodes()
    try:
        yield cluster, worker, env, Ledger(tmp_path / "ledger.txt")
    finally:
        cluster.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)


def _raylet(node) -> int:  # type: ignore[no-untyped-def]
    """The pid of a node's raylet: every worker of that node (a replica among them) is its child."""
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _deploys(ledger: Ledger) -> list[int]:
    """The pid of each deploy so far: the fake python env runs in its replica's process."""
    return [int(line.split()[1]) for line in ledger.path.read_text().splitlines() if line.startswith("deploy ")]


def test_replicas_on_two_nodes_take_sessions_and_a_lost_nodes_episodes_replay_on_the_other(two_nodes, tmp_path):
    cluster, worker, env, ledger = two_nodes
    server = RayServer(tmp_path, "--ray-address", cluster.address, "--replicas", "2", "--replica-cpus", "1", env=env)
    shared = Shared(server.url, token_var=TOKEN_VAR, waits_for_server=True, reset_timeout=120)
    removed = asyncio.Event()
    started: list[int] = []

    async def rollout(n: int):  # type: ignore[no-untyped-def]
        async with Session(shared) as session:
            rollout = session.rollout("echo", attempts=2)

            async def attempt(episode):  # type: ignore[no-untyped-def]
                if rollout.record.attempts == 1:  # every first attempt is deployed before the node goes
                    started.append(n)
                    await removed.wait()
                assert (await rollout.call("echo", {"text": "ping"})).text == "ping"
                return await rollout.end_turn("ping")

            _, result = await rollout.play(attempt)
            return rollout.record, result

    async def main():  # type: ignore[no-untyped-def]
        # one rollout at a time, each held open, until a replica on each node has one: the least busy replica takes
        # the next, but a replica slow to say how busy it is (a loaded machine) can be passed over once
        plays, heads = [], {_raylet(cluster.head_node), _raylet(worker)}
        while len(plays) < MOST:
            plays.append(asyncio.ensure_future(rollout(len(plays))))
            await asyncio.wait_for(_until(lambda: len(started) == len(plays)), 120)
            by_node = collections.Counter(parent_of(replica) for replica in _deploys(ledger))  # a worker's parent
            if set(by_node) == heads:
                break
        assert set(by_node) == heads, by_node  # a replica on each node took sessions
        on_lost = by_node[_raylet(worker)]
        cluster.remove_node(worker)  # the machine is gone: its raylet, its proxy and its replica with it
        removed.set()
        return len(plays), on_lost, await asyncio.gather(*plays)

    try:
        server.start()
        rollouts, on_lost, played = asyncio.run(main())
        for n, (record, result) in enumerate(played):
            assert (result.outcome, result.reward) == ("scored", 1.0), (n, result)
            # a lost attempt is the env's doing, never the policy's, and is played again: never trained on as a zero
            assert record.attempts == 1 + len(record.failures) <= 2, record
            assert all(f.replayable and f.fault != "policy" for f in record.failures), record
        replayed = sum(record.attempts - 1 for record, _ in played)
        # every episode on the lost node's replica was replayed (and those that only went through its proxy)
        assert on_lost <= replayed and len(_deploys(ledger)) == rollouts + replayed
        assert {parent_of(p) for p in _deploys(ledger)[rollouts:]} == {_raylet(cluster.head_node)}  # on the head
    finally:
        code, log = server.terminate()
        server.cleanup()
    assert code == 0, log[-3000:]
