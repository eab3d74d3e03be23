"""``agentenv serve --ray --ray-address``: the bundle as one application on a Ray cluster someone else runs.

The cluster is ``ray start --head`` on loopback; the bundle folder is shipped to the replicas (they read
it from their working directory, ``.``). Stopping the driver deletes the application, with every episode
torn down, and leaves the cluster running.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import pytest
from agentenv.client.session import Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import EpisodeLost
from prometheus_client.parser import text_string_to_metric_families

from tests.support import FAKE, Ledger, free_port, wait_until
from tests.support.ray import RUN_VAR, TOKEN, TOKEN_VAR, RayServer, processes_of, ray_token


@pytest.fixture
def cluster(tmp_path):
    """A one-node Ray cluster on loopback, started with ``ray start``; its processes are killed by pid after."""
    marker = uuid.uuid4().hex
    ray_dir = Path(tempfile.mkdtemp(prefix="ac-", dir="/tmp"))
    # loopback only; Ray's token auth on, with a token of this cluster's own (ray start makes none)
    env = {**os.environ, RUN_VAR: marker, "RAY_TMPDIR": str(ray_dir), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", **ray_token(ray_dir),
           "AGENTENV_FAKE_LEDGER": str(tmp_path / "ledger.txt"), TOKEN_VAR: TOKEN}  # fmt: skip
    gcs, metrics = free_port(), free_port()
    env["RAY_metrics_report_interval_ms"] = "1000"  # Ray's default, 10 s, would make a scrape wait that long
    ray = Path(sys.executable).parent / "ray"
    head = subprocess.Popen([str(ray), "start", "--head", "--port", str(gcs), "--num-cpus", "2", "--include-dashboard",
                             "false", "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats",
                             "--dashboard-agent-listen-port", str(free_port()),  # not Ray's fixed default
                             "--metrics-export-port", str(metrics)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # the cluster's processes stay in this session  # fmt: skip
    out, _ = head.communicate(timeout=180)
    assert head.returncode == 0, out
    session = head.pid
    try:
        yield f"127.0.0.1:{gcs}", env, (marker, session), Ledger(tmp_path / "ledger.txt"), metrics
    finally:
        for pid in processes_of(marker, session):  # ray stop would stop every Ray on the machine, not just this one
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert wait_until(lambda: not processes_of(marker, session), 30, interval=0.2), (
            "the cluster's processes are gone"
        )
        shutil.rmtree(ray_dir, ignore_errors=True)


EPISODES = 4


def _started_by_replica(port: int, total: int) -> dict[str, float] | None:
    """``ray_agentenv_episodes_started`` of each replica, as the node's metrics agent exports it, once they sum to
    ``total`` (None before: Ray exports what its workers report, every second here)."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    except httpx.TimeoutException:  # Ray's metrics agent, on a loaded node, may take longer than that: ask again
        return None
    by_replica = {
        sample.labels["replica"]: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name == "ray_agentenv_episodes_started_total" and sample.labels.get("purpose") == "play"
    }
    return by_replica if sum(by_replica.values()) == total else None


def test_a_bundle_shipped_to_a_cluster_has_its_replicas_metrics_merged_and_its_driver_leaves_the_cluster(
    cluster, tmp_path, monkeypatch
):
    address, env, marker, ledger, metrics = cluster
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    server = RayServer(tmp_path, "--ray-address", address, "--replicas", "2", env=env)
    try:
        server.start()
        shared = Shared(server.url, token_var=TOKEN_VAR, reset_timeout=60)
        held = [SyncSession(shared) for _ in range(EPISODES)]  # held open at once: the router spreads them
        for played in held:
            played.start("echo")
        for played in held:
            played.end_turn("hello")
            played.close()
        session = SyncSession(shared)
        session.start("proc-echo")
        assert session.call("echo", {"text": "shipped"}).text == "shipped"
        # the replicas' metrics, merged as Ray Serve's are: the node's metrics agent exports each replica's series
        started = wait_until(lambda: _started_by_replica(metrics, EPISODES + 1), 120, interval=0.2)
        assert started, "the node exports the episodes"
        assert len(started) == 2 and sum(started.values()) == EPISODES + 1, started
        assert ledger.count("teardown") == EPISODES

        code, stderr = server.terminate()
    finally:
        server.cleanup()

    assert code == 0, stderr
    assert ledger.count("teardown") == EPISODES + 1  # the open episode was torn down
    with pytest.raises(EpisodeLost):
        session.call("echo", {"text": "gone?"})
    assert httpx.get(server.url + "/health").status_code == 404  # Serve still runs; the application is gone
    assert processes_of(*marker)  # and so does the cluster
    status = subprocess.run([str(Path(sys.executable).parent / "ray"), "status", "--address", address], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert status.returncode == 0 and "Active:" in status.stdout, status.stderr


def test_a_serve_already_listening_on_a_public_address_is_refused_without_a_token(cluster):
    # Ray keeps a running Serve's host and port, whatever --host says: it served tokenless on 0.0.0.0
    address, env, _, _, _ = cluster
    port = free_port()
    serve = Path(sys.executable).parent / "serve"
    argv = [str(serve), "start", "--address", address, "--http-host", "0.0.0.0", "--http-port", str(port)]
    started = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    tokenless = {k: v for k, v in env.items() if k != TOKEN_VAR}
    argv = [sys.executable, "-m", "agentenv.cli", "serve", str(FAKE), "--ray", "--ray-address", address]
    done = subprocess.run([*argv, "--port", str(port)], env=tokenless, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "0.0.0.0" in done.stderr and "Serve already listened there" in done.stderr
    assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 404  # nothing of it was left deployed
