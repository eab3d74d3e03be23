"""Deploy ahead (``build_app(warm=N)``): deployments kept ready per toolset, played once, replaced, torn down.

A bundle of its own: its env writes each deploy, setup, call and teardown to a ledger with the instance's id, so
the tests see which deployment a rollout played, when it was deployed, and that it was never played twice.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession

from tests.support import wait_until

ENV = """
import os, time, uuid
from agentenv import Env, tool


def ledger(*words):
    with open(os.environ["WARM_LEDGER"], "a") as f:
        f.write(" ".join(str(w) for w in words) + "\\n")


class Warm(Env):
    def __init__(self, config, bundle_dir):
        super().__init__(config, bundle_dir)
        self.id = uuid.uuid4().hex[:8]
        self.task = None

    def deploy(self):
        failing = self.config.get("fail_first_file")
        if failing and not os.path.exists(failing):
            open(failing, "w").close()
            ledger("failed", self.id)
            raise RuntimeError("the first deploy fails on purpose")
        time.sleep(float(self.config.get("deploy_seconds", 0)))
        ledger("deployed", self.id, time.time())

    def setup(self, task):
        self.task = task.id
        ledger("setup", self.id, task.id, task.metadata.get("answer"))

    @tool({"type": "object", "properties": {}})
    def whoami(self):
        "Which instance answers, and for which task."
        ledger("called", self.id)
        return f"{self.id} {self.task}"

    def teardown(self):
        ledger("torn", self.id)
"""

PROGRAM = """
import json, os, sys, threading, time
ledger = lambda *w: open(os.environ["WARM_LEDGER"], "a").write(" ".join(map(str, w)) + "\\n")
task = None


def exit_soon(name):  # the first program exits a moment after its deploy, while it is kept ready
    time.sleep(0.3)
    ledger("exited", name)
    os._exit(0)


for line in sys.stdin:
    req = json.loads(line)
    op, result = req["op"], None
    if op == "tools":
        result = [{"name": "pid", "description": "The program's pid and task.", "parameters": {"type": "object"}}]
    elif op == "deploy":
        name = os.urandom(4).hex()
        first = "program" not in open(os.environ["WARM_LEDGER"]).read()
        ledger("program", name)
        if first and os.environ.get("WARM_EXIT_FIRST"):
            threading.Thread(target=exit_soon, args=(name,), daemon=True).start()
    elif op == "setup":
        task = req["task"]["id"]
    elif op == "call":
        result = f"{name} {task}"
    print(json.dumps({"id": req["id"], "ok": True, "result": result}), flush=True)
    if op == "teardown":
        break
"""

BUNDLE = """name: warm
envs:
  warm: {kind: python, target: warm_env:Warm, config: {deploy_seconds: 0.3}}
  flaky: {kind: python, target: warm_env:Warm, config: {fail_first_file: FLAG}}
  prog: {kind: subprocess, command: [python, prog.py], setup: true, pass_env: [WARM_LEDGER, WARM_EXIT_FIRST],
         sandbox: {write: [$WARM_LEDGER]}}
tasks: tasks/*.yaml
"""

TASK = """id: {id}
split: train
toolset: {{envs: [{env}]}}
metadata: {{answer: {id}-answer}}
turns:
- prompt: Who answers?
  verifiers: [{{id: said, kind: contains, answer: x}}]
"""


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "warm"
    (folder / "tasks").mkdir(parents=True)
    (folder / "warm_env.py").write_text(ENV)
    (folder / "prog.py").write_text(PROGRAM)
    (folder / "bundle.yaml").write_text(BUNDLE.replace("FLAG", str(tmp_path / "failed-once")))
    for task, env in (("a", "warm"), ("b", "warm"), ("f", "flaky"), ("p", "prog")):
        (folder / "tasks" / f"{task}.yaml").write_text(TASK.format(id=task, env=env))
    monkeypatch.setenv("WARM_LEDGER", str(tmp_path / "ledger.txt"))
    return folder


def lines(word: str) -> list[list[str]]:
    path = Path(os.environ["WARM_LEDGER"])
    text = path.read_text() if path.exists() else ""
    return [line.split()[1:] for line in text.splitlines() if line.split()[0] == word]


def wait_for(word: str, n: int, timeout: float = 20.0) -> list[list[str]]:
    wait_until(lambda: len(lines(word)) >= n, timeout, interval=0.02)
    return lines(word)


def play(url: str, task: str, tool: str = "whoami") -> tuple[str, float]:
    """Play ``task`` once; returns the tool's answer and when the rollout started."""
    session = SyncSession(Shared(url))
    try:
        began = time.time()
        session.start(task)
        answer = session.call(tool, {}).text
        assert session.end_turn("x").result.outcome == "scored"
        return answer, began
    finally:
        session.close()


def test_a_rollout_plays_a_deployment_made_before_it_started_once_and_another_takes_its_place(bundle, serve):
    server = serve(bundle, warm=2)
    ready = wait_for("deployed", 4)  # 2 per toolset of a python env: warm (a and b share it), flaky (once it failed)
    assert len(ready) == 4 and len(wait_for("program", 2)) == 2 and not lines("setup")  # and prog's 2 programs
    answers = []
    for n, task in enumerate(("a", "b", "a")):
        if n == 2:
            wait_for("deployed", 6)  # the two played are replaced (a rollout that finds none ready deploys its own)
        answer, began = play(server.url, task)
        instance, played_for = answer.split()
        deployed_at = next(float(at) for i, at in lines("deployed") if i == instance)
        assert deployed_at < began and played_for == task  # deployed ahead, then set up for this task alone
        answers.append(instance)
    assert len(set(answers)) == 3  # never played twice
    assert [s for s in lines("setup") if s[0] in answers] == [[answers[0], "a", "a-answer"], [answers[1], "b",
                                                               "b-answer"], [answers[2], "a", "a-answer"]]  # fmt: skip
    assert all([i] in lines("torn") for i in answers)  # each torn down after its episode...
    assert len(wait_for("deployed", 7)) == 7  # ...and another deployed in its place


def test_a_deploy_ahead_that_fails_is_replaced_and_never_handed_out(bundle, serve):
    server = serve(bundle, warm=1)
    failed = wait_for("failed", 1)
    wait_for("deployed", 2)
    answer, _ = play(server.url, "f")
    assert answer.split()[0] not in {i for (i,) in failed}
    assert [failed[0][0]] in lines("torn")


def test_a_ready_program_that_exited_is_replaced_and_the_rollout_plays_a_live_one(
    bundle, serve, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("WARM_EXIT_FIRST", "1")
    server = serve(bundle, warm=1)
    (dead,) = (name for (name,) in wait_for("exited", 1))
    time.sleep(0.5)  # for the server's child watcher to see the exit (a pidfd)
    answer, _ = play(server.url, "p", tool="pid")
    name, task = answer.split()
    assert name != dead and task == "p"  # and the subprocess env got the setup request with its task


def test_ready_deployments_give_way_to_sessions_at_capacity_and_are_torn_down_at_shutdown(bundle, serve):
    server = serve(bundle, warm=2, max_concurrent_envs=3)
    wait_for("deployed", 2), wait_for("program", 1)
    time.sleep(1.0)
    assert len(lines("deployed")) + len(lines("program")) == 3  # 3 toolsets could hold 6, capacity holds 3
    sessions = [SyncSession(Shared(server.url)) for _ in range(3)]
    try:
        for session in sessions:  # every session is admitted: ready ones are torn down to make room
            session.start("a")
            assert session.call("whoami", {}).text
    finally:
        for session in sessions:
            session.close()
    server.stop()
    deployed = {i for i, _ in lines("deployed")}
    assert deployed <= {i for (i,) in lines("torn")}  # nothing ready is left at shutdown (nor half-deployed)
