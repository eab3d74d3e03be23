"""Owners that die: a server SIGKILLed with 32 sessions whose envs started programs, a trainer running
``AgentEnv.local`` killed by SIGTERM and by SIGKILL, a trainer running a harness agent killed by SIGKILL, a
server restarted between episodes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from agentenv.session import Session
from agentenv.settings import Shared

from tests.conftest import FAKE, Ledger, alive
from tests.faults.conftest import Matrix, left_after, marked, play, run

SESSIONS = 32


def test_a_sigkilled_server_leaves_no_process_behind_and_its_clients_replay_after_restart(
    matrix: Matrix, ledger: Ledger, ops_bundle: Path
) -> None:
    server = matrix.serve("--max-concurrent-envs", str(SESSIONS + 8), bundle=ops_bundle)
    shared = Shared(server.url, waits_for_server=True, reset_timeout=120, tool_timeout=60)

    async def main() -> list[object]:
        gate = asyncio.Event()
        ready: list[int] = []

        async def one(i: int) -> object:
            task, text = ("proc-echo", "sub") if i % 2 else ("ops", "ops")

            async def first(rollout: object) -> None:
                if task == "proc-echo":  # a subprocess env's child; every fourth one in a session of its own
                    await rollout.call("spawn", {"detach": i % 4 == 1})  # type: ignore[attr-defined]
                else:  # a Python env's child, started with a plain subprocess.Popen
                    await rollout.call("spawn_sleeper", {})  # type: ignore[attr-defined]
                ready.append(i)
                await gate.wait()  # the server is SIGKILLed and restarted meanwhile

            return await play(shared, task, [("echo", {"text": text})], text, attempts=3, first=first)

        playing = [asyncio.ensure_future(one(i)) for i in range(SESSIONS)]
        while len(ready) < SESSIONS:
            await asyncio.sleep(0.05)
            assert not any(p.done() for p in playing), [p.result() for p in playing if p.done()]
        children = [int(e.split()[1]) for e in ledger.events() if e.startswith("child ")]
        assert len(children) == SESSIONS and all(alive(pid) for pid in children)

        await asyncio.to_thread(server.kill)  # SIGKILL: no teardown runs
        left = await asyncio.to_thread(left_after, matrix.mark)
        assert left == [], f"processes of the killed server still alive after 5 s: {left}"
        assert not any(alive(pid) for pid in children)

        await asyncio.to_thread(matrix.serve, "--max-concurrent-envs", str(SESSIONS + 8), port=server.port,
                                bundle=ops_bundle)  # fmt: skip
        gate.set()
        return await asyncio.gather(*playing)

    records = run(main())
    for record in records:
        matrix.saw(record)  # type: ignore[arg-type]
    assert matrix.lost == SESSIONS  # each first attempt went with the server
    assert set(matrix.kinds()) == {"connection_lost"}
    assert [r.outcome for r in matrix.results] == ["scored"] * SESSIONS  # ... and was replayed after the restart
    assert {r.reward for r in matrix.results} == {1.0}
    assert matrix.failures_scored == 0


TRAINER = r"""
import sys, time
from agentenv_trl import AgentEnv

env = AgentEnv.local(sys.argv[1], max_concurrent_envs=8)
row = next(r for r in env.dataset if r["task_id"] == "proc-echo")
games = []
for i in range(4):
    game = env.environments[row["environment"]]()
    game.reset(**row)
    print("child", game.spawn(detach=i % 2 == 1), flush=True)
    games.append(game)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_trainer_running_a_local_server_leaves_no_process_behind(
    matrix: Matrix, tmp_path: Path, how: signal.Signals
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    trainer = subprocess.Popen(
        [sys.executable, str(script), str(FAKE)],
        env={**os.environ, **matrix.env(TRL_EXPERIMENTAL_SILENCE="1")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert trainer.stdout is not None
    children = []
    for line in trainer.stdout:
        if line.startswith("child "):
            children.append(int(line.split()[1]))
        if line.strip() == "ready":
            break
    assert len(children) == 4 and all(alive(pid) for pid in children), trainer.stderr.read() if trainer.stderr else ""
    assert len(marked(matrix.mark)) >= 1 + 4 + 4  # the trainer, its env programs and their children (and a reaper)

    trainer.send_signal(how)
    trainer.communicate(timeout=60)
    left = left_after(matrix.mark)
    assert left == [], f"processes of the killed trainer still alive after 5 s: {left}"
    assert trainer.returncode == -how


AGENT_TRAINER = """
import asyncio, sys
from pathlib import Path
from agentenv.agentproc import AgentDirs, AgentProcess
from agentenv.agents import Launch

async def main():
    root = Path(sys.argv[1])
    # an agent (the harness runs them this way) that starts a child and waits for it, writing both pids
    script = f"sleep 600 & echo $! > {root}/pids.tmp; echo $$ >> {root}/pids.tmp; mv {root}/pids.tmp {root}/pids; wait"
    agent = AgentProcess(Launch(argv=("sh", "-c", script)), AgentDirs(root / "agent"))
    running = asyncio.create_task(agent.run())
    while not (root / "pids").exists():
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await running

asyncio.run(main())
"""


def test_a_sigkilled_trainer_leaves_no_agent_process_behind(matrix: Matrix, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(AGENT_TRAINER)
    trainer = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=matrix.env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert trainer.stdout is not None
    assert trainer.stdout.readline().strip() == "ready", trainer.stderr.read() if trainer.stderr else ""
    agent = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert len(agent) == 2 and all(alive(pid) for pid in agent)  # the agent's shell and its child

    trainer.kill()  # SIGKILL: no kill() of the trainer's runs
    trainer.communicate(timeout=60)
    for _ in range(50):
        if not any(alive(pid) for pid in agent):
            break
        threading.Event().wait(0.1)
    assert [pid for pid in agent if alive(pid)] == [], "the agent outlived its trainer by 5 s"
    assert left_after(matrix.mark) == []  # and the trainer's reaper is gone too


def test_a_server_restarted_between_episodes_is_waited_out_by_the_same_session(matrix: Matrix) -> None:
    server = matrix.serve()
    shared = Shared(server.url, waits_for_server=True, reset_timeout=60)

    async def main() -> None:
        session = Session(shared)
        try:
            matrix.saw(await play(shared, "echo", [("echo", {"text": "ping"})], "ping", session=session))
            code, stderr = await asyncio.to_thread(server.terminate)
            assert code == 0 and "Traceback" not in stderr
            threading.Timer(1.0, lambda: matrix.serve(port=server.port)).start()
            matrix.saw(await play(shared, "echo", [("echo", {"text": "ping"})], "ping", session=session))
        finally:
            await session.close()

    run(main())
    assert [(r.outcome, r.reward) for r in matrix.results] == [("scored", 1.0), ("scored", 1.0)]
    assert matrix.lost == 0  # the restart fell between episodes: the second start waited it out
    assert matrix.failures_scored == 0
