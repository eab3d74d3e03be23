"""Past one machine: a bundle on a Ray cluster of two nodes (``ray.cluster_utils.Cluster``: two raylets on this host).

The replicas are placed one per node, sessions reach both, and a node removed mid-rollout (its raylet and every
process it ran killed, as a lost machine is) fails its episodes as the env's doing: they are played again on the
other node and scored, never trained on as a zero, and the application keeps serving.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from agentenv.session import Session, Shared

from tests.conftest import Ledger, alive, running
from tests.ray.conftest import RUN_VAR, TOKEN, TOKEN_VAR, RayServer, parent_of, starter_of, wait_until

ROLLOUTS = 4


@pytest.fixture
def two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A head and a worker node of one CPU each, on loopback; everything they run carries this test's marker."""
    from ray.cluster_utils import Cluster

    ray_dir = Path(tempfile.mkdtemp(prefix="an-", dir="/tmp"))  # short: Ray's socket paths have a limit
    # Ray's token auth off: Cluster's in-process client reads the mode once, when this process first loaded Ray
    env = {RUN_VAR: uuid.uuid4().hex, "RAY_TMPDIR": str(ray_dir), "RAY_USAGE_STATS_ENABLED": "0",
           "AGENTENV_FAKE_LEDGER": str(tmp_path / "ledger.txt"), TOKEN_VAR: TOKEN, "RAY_AUTH_MODE": "disabled"}  # fmt: skip
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


def test_replicas_on_two_nodes_take_sessions_and_a_lost_nodes_episodes_replay_on_the_other(two_nodes, tmp_path):
    cluster, worker, env, ledger = two_nodes
    server = RayServer(tmp_path, "--ray-address", cluster.address, "--replicas", "2", "--replica-cpus", "1", env=env)
    shared = Shared(server.url, token_var=TOKEN_VAR, waits_for_server=True, reset_timeout=120)
    ready, removed = asyncio.Event(), asyncio.Event()
    placed: dict[int, tuple[int, int]] = {}  # rollout -> the node (its raylet) its replica runs on, its env program

    async def rollout(n: int):  # type: ignore[no-untyped-def]
        async with Session(shared) as session:
            rollout = session.rollout("proc-echo", attempts=2)

            async def attempt(started):  # type: ignore[no-untyped-def]
                if rollout.record.attempts == 1:
                    answer = await rollout.call("spawn", {})
                    found = running(answer.text)
                    assert len(found) == 1, answer
                    [child] = found
                    program = parent_of(child)
                    placed[n] = (parent_of(starter_of(program)), program)
                    if len(placed) == ROLLOUTS:
                        ready.set()
                    await removed.wait()
                assert (await rollout.call("echo", {"text": "sub"})).text == "sub"
                return await rollout.end_turn("sub")

            _, result = await rollout.play(attempt)
            return rollout.record, result

    async def main():  # type: ignore[no-untyped-def]
        plays = [asyncio.ensure_future(rollout(n)) for n in range(ROLLOUTS)]  # least-busy routing uses both
        await asyncio.wait_for(ready.wait(), 180)
        assert {node for node, _ in placed.values()} == {_raylet(cluster.head_node), _raylet(worker)}, placed
        cluster.remove_node(worker)  # the machine is gone: its raylet, its replica and its reaper with it
        removed.set()
        return await asyncio.gather(*plays)

    try:
        server.start()
        lost = _raylet(worker)
        played = asyncio.run(main())
        for n, (record, result) in enumerate(played):
            assert (result.outcome, result.reward) == ("scored", 1.0), (n, result)
            if placed[n][0] == lost:  # lost with the node: never scored, never the policy's; replayed on the head
                assert record.attempts == 2 and len(record.failures) == 1, record
                assert record.failures[0].replayable and record.failures[0].fault != "policy", record
            else:
                assert record.attempts == 1 and record.failures == [], record
        gone = [program for node, program in placed.values() if node == lost]
        wait_until(lambda: not any(alive(pid) for pid in gone), 30, "the lost node's env programs are gone")
        assert ledger.count("deploy") == ROLLOUTS + len(gone)
    finally:
        code, log = server.terminate()
        server.cleanup()
    assert code == 0, log[-3000:]
