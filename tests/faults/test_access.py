"""Who may talk to a server: web pages (an ``Origin``), clients without the token, in-process servers' own clients,
requests arriving on a public address, and the routes a client may reach at all."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from agentenv.client.settings import Shared
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support import FAKE, Ledger, free_port
from tests.support.faults import Matrix, play, public_address, run
from tests.support.procs import listening
from tests.support.wire import ask, open_ws, reset_data, ws_url

TOKEN = "tok-a77c01d4e8"
EVIL = "https://evil.example"


def refused_counts(stderr: str, what: str) -> int:
    """The refusals of ``what`` (``UNAUTHORIZED``, ``CAPACITY_REACHED``) the server's log lines add up to."""
    return sum(int(n) for n in re.findall(rf"(\d+) {what}", stderr))


def test_a_web_page_can_open_no_session_on_a_tokenless_server_unless_its_origin_is_allowed(
    matrix: Matrix, ledger: Ledger
) -> None:
    # any page in the user's browser may open a WebSocket to 127.0.0.1; the browser says which page in Origin
    server = matrix.serve()
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(server.url), origin=EVIL, open_timeout=10)  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert "--allow-origin" in refused.value.response.body.decode()
    page = httpx.post(f"{server.url}/fake/tasks", json={"split": "train"}, headers={"Origin": EVIL})
    assert page.status_code == 403
    assert ledger.count("deploy") == 0
    with open_ws(server.url) as ws:  # a program sends no Origin: served as before
        assert ask(ws, {"type": "reset", "data": reset_data(task_id="echo")})["type"] == "observation"
    allowed = matrix.serve("--allow-origin", EVIL)
    with connect(ws_url(allowed.url), origin=EVIL, open_timeout=10) as ws:  # type: ignore[arg-type]
        assert ask(ws, {"type": "reset", "data": reset_data(task_id="echo")})["type"] == "observation"


TRAINER = r"""
import pickle, sys
from agentenv_trl import AgentEnv

env = AgentEnv.local(sys.argv[1], max_concurrent_envs=4)
print("url", env.url, flush=True)
row = next(r for r in env.dataset if r["task_id"] == "echo")
game = env.environments[row["environment"]]()
game.reset(**row)
game.echo(text="ping")
game.end_turn(reply="ping")
print("reward", game.get_reward(), flush=True)
sys.stdin.readline()  # plays in process until the test has looked for a port
pickle.dumps(type(game))  # as for a worker TRL spawns: the loopback server starts
print("served", env._worker_settings()["url"], flush=True)
sys.stdin.readline()  # serves until the test has tried it
env.close()
"""


@pytest.mark.parametrize("loop", ["auto"])  # the trainer's own server, on uvicorn's choice of loop
def test_a_trainer_opens_no_port_until_a_worker_needs_one_and_then_answers_only_its_own_process(
    matrix: Matrix, tmp_path: Path
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, **matrix.env(TRL_EXPERIMENTAL_SILENCE="1")}
    trainer = subprocess.Popen(
        [sys.executable, str(script), str(FAKE)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert trainer.stdout is not None and trainer.stdin is not None
    try:
        assert trainer.stdout.readline().split()[1].startswith("local:")  # AgentEnv.local plays in process
        assert trainer.stdout.readline().split() == ["reward", "1.0"]
        assert listening(trainer.pid) == []  # nothing on the machine can reach its episodes
        trainer.stdin.write("\n")
        trainer.stdin.flush()
        url = trainer.stdout.readline().split()[1]
        assert listening(trainer.pid) == [int(url.rsplit(":", 1)[1])]  # the workers' server, and only it
        assert httpx.get(url + "/health").status_code == 200
        assert httpx.post(url + "/fake/tasks", json={"split": "train"}).status_code == 401  # another process
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(url), open_timeout=10)
        assert refused.value.response.status_code == 401
    finally:
        trainer.communicate("\n", timeout=60)
    assert trainer.returncode == 0


def test_only_the_routes_agentenv_uses_are_served(matrix: Matrix, ledger: Ledger) -> None:
    # OpenEnv's simulation routes deploy an episode per request, past the guard and its capacity
    server = matrix.serve("--max-concurrent-envs", "2")
    answers = [httpx.post(f"{server.url}/reset", json={"task_id": "echo"}, timeout=60).status_code for _ in range(6)]
    answers.append(httpx.post(f"{server.url}/step", json={"action": {"op": "call"}}).status_code)
    answers.append(httpx.get(f"{server.url}/state").status_code)
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    answers.append(httpx.post(f"{server.url}/mcp", json=mcp).status_code)
    assert answers == [404] * 9
    with pytest.raises(InvalidStatus):
        connect(ws_url(server.url).replace("/ws", "/mcp"), open_timeout=10)
    assert ledger.count("deploy") == 0
    for path in ("/health", "/agentenv", "/fake/splits", "/metadata", "/schema"):
        assert httpx.get(server.url + path).status_code == 200, path
    assert run(play(Shared(server.url), "echo", [("echo", {"text": "ping"})], "ping")).result.reward == 1.0


def test_websockets_without_the_token_are_counted_and_logged_once_per_period(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = matrix.serve("--token-var", "FAULTS_TOKEN", env={"FAULTS_TOKEN": TOKEN})
    for _ in range(40):
        with pytest.raises(InvalidStatus):
            connect(ws_url(server.url), open_timeout=10)
    monkeypatch.setenv("FAULTS_TOKEN", TOKEN)
    record = run(play(Shared(server.url, token_var="FAULTS_TOKEN"), "echo", [("echo", {"text": "ping"})], "ping"))
    assert matrix.saw(record).reward == 1.0
    code, stderr = server.terminate()
    assert code == 0
    assert "ERROR" not in stderr and "without completing handshake" not in stderr, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if "UNAUTHORIZED" in line]
    assert 1 <= len(lines) <= 3 and refused_counts(stderr, "UNAUTHORIZED") == 40, stderr[-2000:]


def test_requests_arriving_on_a_public_address_need_a_token_whatever_runs_the_app(tmp_path: Path) -> None:
    # the user's own uvicorn on 0.0.0.0 (the CLI refuses that without a token; build_app is the Python way in)
    script = tmp_path / "own_uvicorn.py"
    script.write_text(
        "import sys, uvicorn\nfrom agentenv_server import build_app\n"
        "uvicorn.run(build_app(sys.argv[1]), host='0.0.0.0', port=int(sys.argv[2]), log_level='warning')\n"
    )
    port = free_port()
    own = subprocess.Popen([sys.executable, str(script), str(FAKE), str(port)], stderr=subprocess.PIPE, text=True)
    try:
        local = f"http://127.0.0.1:{port}"
        asyncio.run(_wait_up(local))
        assert httpx.get(local + "/fake/splits").status_code == 200  # on loopback: as agentenv serve
        remote = httpx.get(f"http://{public_address()}:{port}/fake/splits")
        assert remote.status_code == 403 and "token=" in remote.json()["detail"]
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://{public_address()}:{port}/ws", open_timeout=10)
        assert refused.value.response.status_code == 403
    finally:
        own.terminate()
        own.communicate(timeout=30)


async def _wait_up(url: str, seconds: float = 60.0) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(int(seconds * 10)):
            try:
                if (await client.get(url + "/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"nothing answered on {url}")
