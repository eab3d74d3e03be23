"""``GET /metrics`` of a real ``agentenv serve``: behind the token, parsed by the Prometheus client's own parser."""

from __future__ import annotations

import httpx
from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import EpisodeLost
from prometheus_client.parser import text_string_to_metric_families

from tests.support import FAKE
from tests.support.bundles import copy_bundle, patch

TOKEN_VAR = "AGENTENV_METRICS_TEST_TOKEN"
TOKEN = "tok-metrics-5e1f"


def scrape(url: str, token: str | None = TOKEN) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(url + "/metrics", headers=headers, timeout=30)
    answer.raise_for_status()
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def play(url: str, task: str, *, attempts: int = 1) -> None:
    session = SyncSession(Shared(url, token_var=TOKEN_VAR))
    try:
        rollout = session.rollout(task, attempts=attempts)
        rollout.start()
        try:
            rollout.call("echo", {"text": "ping"})
            rollout.call("no_such_tool", {})
            rollout.end_turn("ping")
        except EpisodeLost:
            pass  # deploy-fails: the env's fault, counted as such
        rollout.conclude()
    finally:
        session.close()


def test_counters_match_the_episodes_played_and_the_refusals(serve_process, monkeypatch):
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    server = serve_process(FAKE, "--token-var", TOKEN_VAR, env={TOKEN_VAR: TOKEN})
    for _ in range(3):
        play(server.url, "echo")
    play(server.url, "deploy-fails")
    assert httpx.get(server.url + "/agentenv", timeout=30).status_code == 401
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401  # behind the token like the rest
    got = scrape(server.url)
    assert got[("agentenv_episodes_started_total", (("purpose", "play"),))] == 4
    scored = (("fault", ""), ("kind", ""), ("outcome", "scored"), ("purpose", "play"))
    failed = (("fault", "env"), ("kind", "deploy"), ("outcome", "failed"), ("purpose", "play"))
    assert got[("agentenv_episodes_ended_total", scored)] == 3
    assert got[("agentenv_episodes_ended_total", failed)] == 1
    assert got[("agentenv_tool_calls_total", (("error", "false"),))] == 3
    assert got[("agentenv_tool_calls_total", (("error", "true"),))] == 3
    assert got[("agentenv_tool_seconds_count", ())] == 3
    assert got[("agentenv_deploy_seconds_count", ())] >= 3 and got[("agentenv_verify_seconds_count", ())] == 3
    assert got[("agentenv_refused_total", (("reason", "UNAUTHORIZED"),))] == 2
    assert got[("agentenv_sessions_open", ())] == 0 and got[("agentenv_episodes_running", ())] == 0
    assert got[("process_open_fds", ())] > 0


def test_the_sandboxs_limits_hit_are_counted_by_limit(serve_process, tmp_path, monkeypatch):
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    bundle = copy_bundle(tmp_path)
    limits = "{call_seconds: 2, memory_mb: 128, pids: 64, file_mb: 1, disk_mb: 8}"
    patch(bundle / "bundle.yaml", "envs:\n", f"envs:\n  bash:\n    kind: bash\n    sandbox: {limits}\n")
    server = serve_process(bundle, "--token-var", TOKEN_VAR, env={TOKEN_VAR: TOKEN})
    assert not [key for key in scrape(server.url) if key[0] == "agentenv_sandbox_limits_hit_total"]
    session = SyncSession(Shared(server.url, token_var=TOKEN_VAR))
    try:
        session.start("bash")
        answers = [session.call("bash", {"command": c}).text for c in ("head -c 2000000 /dev/zero > f", "sleep 9")]
        session.end_turn("hi")
    finally:
        session.close()
    assert "file size limit (1 MiB) reached" in answers[0] and "ran past its time limit" in answers[1]
    got = scrape(server.url)
    assert got[("agentenv_sandbox_limits_hit_total", (("limit", "file_size"),))] == 1
    assert got[("agentenv_sandbox_limits_hit_total", (("limit", "call_time"),))] == 1
