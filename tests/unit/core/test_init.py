"""``agentenv init --full``: the bundle it writes (a bash subprocess env and a process agent beside the python env)
passes the QA gate and serves (the real ``agentenv`` program, a real ``agentenv serve`` process, the session client).
The plain and ``--package`` forms are tested in tests/unit/core/test_bundle_wheel.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentenv.client.session import Session
from agentenv.client.settings import Shared

AGENTENV = Path(sys.executable).with_name("agentenv")


def agentenv(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTENV, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_init_full_writes_a_bundle_that_passes_the_qa_gate(tmp_path):
    done = agentenv("init", "notebook", "--full", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "notebook"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == [
        "agents/solve.py",
        "bundle.yaml",
        "calc_env.py",
        "shout_env.sh",
        "tasks/eval.yaml",
        "tasks/shout.yaml",
        "tasks/train.yaml",
    ]
    gate = agentenv("check", "notebook", "--qa", cwd=tmp_path)  # a relative path, as a person types it
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "bundle 'notebook': 3 tasks in train, eval; loads cleanly" in gate.stdout
    assert "3 task(s) passed the QA gate" in gate.stdout


async def reference(url: str, task: str, tool: str, args: dict[str, object], reply: str) -> object:
    async with Session(Shared(url)) as session:
        rollout = session.rollout(task)

        async def attempt(started: object) -> None:
            await rollout.call(tool, args)
            await rollout.end_turn(reply)

        _, result = await rollout.play(attempt)
        return result


async def test_init_full_writes_a_bundle_that_serves_and_scores_its_references(tmp_path, serve_process):
    assert agentenv("init", "notebook", "--full", cwd=tmp_path).returncode == 0
    server = serve_process(tmp_path / "notebook")
    python = await reference(server.url, "add-001", "add", {"a": 2, "b": 3}, "5")
    bash = await reference(server.url, "shout-001", "shout", {"text": "hello"}, "HELLO")
    assert (python.outcome, python.reward) == ("scored", 1.0)
    assert (bash.outcome, bash.reward) == ("scored", 1.0)  # the bash program's answer, through the server


def test_the_docs_show_the_bash_env_that_init_writes():
    from agentenv.cli import scaffold

    page = (Path(__file__).resolve().parents[3] / "docs" / "subprocess.md").read_text()
    assert f"```bash\n{scaffold._SHOUT_ENV}```\n" in page
