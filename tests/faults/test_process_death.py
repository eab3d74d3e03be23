"""Owners that die: a server SIGKILLed with 32 sessions whose envs started programs, a trainer running
``AgentEnv.local`` killed by SIGTERM and by SIGKILL, a trainer running a harness agent killed by SIGKILL, a
server restarted between episodes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from agentenv.client.session import Session
from agentenv.client.settings import Shared

from tests.support import FAKE, Ledger, alive, running, wait_until
from tests.support.faults import Matrix, left_after, marked, play, run

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
        # a Python env's child is told by its pid, a subprocess env's (in its sandbox's PID namespace) by a marker
        named = [e.split()[1] for e in ledger.events() if e.startswith("child ")]
        children = [pid for n in named for pid in ([int(n)] if n.isdigit() else running(n))]
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


# the trainer's own server (AgentEnv.local) runs on uvicorn's choice of loop, not on a --loop of agentenv serve
@pytest.mark.parametrize("loop", ["auto"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_trainer_running_a_local_server_leaves_no_process_behind(
    matrix: Matrix, tmp_path: Path, how: signal.Signals
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    # its stderr goes to a file: a pipe nobody reads would block it, and reading one blocks until the trainer exits
    with open(tmp_path / "trainer.err", "w") as err:
        trainer = subprocess.Popen(
            [sys.executable, str(script), str(FAKE)],
            env={**os.environ, **matrix.env(TRL_EXPERIMENTAL_SILENCE="1")},
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert trainer.stdout is not None
    children = []
    for line in trainer.stdout:
        if line.startswith("child "):
            children.append(line.split()[1])  # the child's marker: its pid is of its sandbox's PID namespace
        if line.strip() == "ready":
            break
    # a sandboxed child shows in the host's /proc a moment after its program answers (seen in a fresh-clone run)
    wait_until(lambda: all(running(c) for c in children), 10)
    gone = [c for c in children if not running(c)]
    if len(children) != 4 or gone:
        trainer.kill()
        raise AssertionError(f"children {children}, not running: {gone}\n{(tmp_path / 'trainer.err').read_text()}")
    assert len(marked(matrix.mark)) >= 1 + 4 + 4  # the trainer, its env programs and their children (and a reaper)

    trainer.send_signal(how)
    trainer.communicate(timeout=60)
    left = left_after(matrix.mark)
    assert left == [], f"processes of the killed trainer still alive after 5 s: {left}"
    assert not any(running(c) for c in children)
    assert trainer.returncode == -how


AGENT_TRAINER = """
import asyncio, sys
from pathlib import Path
from agentenv.engine.agentproc import AgentDirs, AgentProcess
from agentenv.engine.agents import Launch

async def main():
    root, mark = Path(sys.argv[1]), sys.argv[2]
    # an agent (the harness runs them this way, in its sandbox) that starts a child and waits for it; both carry
    # the mark in their command lines (their pids are of the sandbox's PID namespace) and it says when it is up in
    # its own working folder (the one it may write)
    dirs = AgentDirs(root / "agent")
    script = f"sh -c 'sleep 600; : {mark}' & touch {dirs.work}/up; wait; : {mark}"
    agent = AgentProcess(Launch(argv=("sh", "-c", script)), dirs)
    running = asyncio.create_task(agent.run())
    while not (dirs.work / "up").exists():
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await running

asyncio.run(main())
"""


@pytest.mark.parametrize("loop", ["no server"])
def test_a_sigkilled_trainer_leaves_no_agent_process_behind(matrix: Matrix, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(AGENT_TRAINER)
    trainer = subprocess.Popen([sys.executable, str(script), str(tmp_path), matrix.mark], env=matrix.env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert trainer.stdout is not None
    assert trainer.stdout.readline().strip() == "ready", trainer.stderr.read() if trainer.stderr else ""
    agent = running(matrix.mark)
    assert len(agent) >= 2  # the agent's shell and its child (and the sandbox around them)

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
            restart = threading.Timer(1.0, lambda: matrix.serve(port=server.port))
            restart.start()
            matrix.saw(await play(shared, "echo", [("echo", {"text": "ping"})], "ping", session=session))
        finally:
            await session.close()
        await asyncio.to_thread(restart.join)  # its start() ends before the row's teardown stops the server

    run(main())
    assert [(r.outcome, r.reward) for r in matrix.results] == [("scored", 1.0), ("scored", 1.0)]
    assert matrix.lost == 0  # the restart fell between episodes: the second start waited it out
    assert matrix.failures_scored == 0


def test_a_server_gone_leaves_no_one_listening_on_its_port(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve()
    record = run(play(Shared(server.url), "proc-echo", [("echo", {"text": "sub"})], "sub"))  # starts the reaper too
    assert matrix.saw(record).reward == 1.0
    reapers = [pid for pid, cmdline in marked(matrix.mark) if "sandbox/reaper.py" in cmdline]
    assert len(reapers) == 1
    held = [os.readlink(f"/proc/{reapers[0]}/fd/{fd}") for fd in os.listdir(f"/proc/{reapers[0]}/fd")]
    assert not [link for link in held if link.startswith("socket:")], held  # the server's listening socket
    server.kill()  # SIGKILL: the reaper outlives the server while it sweeps
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
