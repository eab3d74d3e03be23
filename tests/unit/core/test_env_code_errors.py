"""One rule for exceptions in env code: ``ToolError`` is the policy's (scored); any other exception from a tool, a
deploy or a verifier is the env's (failed, never trained on), named by env, tool or verifier and the author's file
and line, with the traceback in the server's log and in ``agentenv play`` (the envbugs fixture bundle)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import EpisodeLost

from tests.support import ROOT

AGENTENV = Path(sys.executable).with_name("agentenv")
BUGS = ROOT / "tests" / "fixtures" / "bundles" / "envbugs"


async def lookup(url: str, tool: str, ids: list[str]) -> object:
    """Play task tool-bug or tool-refuses over the server: ``tool`` with each id, then reply Ada; the result."""
    async with Session(Shared(url)) as session:
        rollout = session.rollout("tool-bug" if tool == "lookup" else "tool-refuses")

        async def attempt(started: object) -> list[object]:
            answers = [await rollout.call(tool, {"id": i}) for i in ids]
            await rollout.end_turn("Ada")
            return answers

        try:
            answers, result = await rollout.play(attempt)
        except EpisodeLost:
            return None, rollout.result
        return answers, result


async def test_a_tool_that_raises_keyerror_fails_the_episode_and_the_server_logs_where(serve_process):
    server = serve_process(BUGS)
    _, result = await lookup(server.url, "lookup", ["e99"])
    _, err = server.terminate()
    assert (result.outcome, result.reward, result.failure.kind, result.failure.stage) == (
        "failed",
        None,
        "crash",
        "tool",
    )
    assert result.failure.message == (
        "tool 'lookup' of env 'db': KeyError: 'e99' (db_env.py:21 in lookup); a tool refuses a call by raising "
        "agentenv.ToolError"
    )
    # the server's log: the task, the env, the tool, the author's file and line, and the traceback from there
    assert "task 'tool-bug', episode " in err
    assert "tool 'lookup' of env 'db': KeyError: 'e99' (db_env.py:21 in lookup)" in err
    assert f'File "{BUGS / "db_env.py"}", line 21, in lookup\n    return self.rows[id]' in err


async def test_a_tool_that_raises_toolerror_is_the_policys_mistake_and_scored(serve_process):
    server = serve_process(BUGS)
    answers, result = await lookup(server.url, "find", ["e99", "e1"])
    assert (result.outcome, result.reward) == ("scored", 1.0)
    assert [(a.error, a.text) for a in answers] == [(True, "error: no row 'e99'; the ids are e1, e2"), (False, "Ada")]


def play(task: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTENV, "play", BUGS, task, "--reference", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("task", "failed", "line"),
    [
        (
            "tool-bug",
            "failed (crash during tool): tool 'lookup' of env 'db': KeyError: 'e99' (db_env.py:21 in lookup)",
            "    return self.rows[id]",
        ),
        (
            "missing-fixture",
            "failed (deploy during deploy): env 'nofixture': FileNotFoundError: [Errno 2] No such file or directory:",
            '    self.rows = json.loads(path.read_text(encoding="utf-8"))',
        ),
        (
            "missing-config",
            "failed (deploy during deploy): env 'noconfig': KeyError: 'fixture' (db_env.py:15 in deploy)",
            '    path = self.bundle_dir / self.config["fixture"]',
        ),
        (
            "verifier-bug",
            "failed (verifier during scoring): verifier 'answer' (python check db_env:name_said): "
            "AttributeError: 'Db' object has no attribute 'names' (db_env.py:38 in name_said)",
            "    return env.names[0] in reply",
        ),
    ],
    ids=["tool-bug", "missing-fixture", "missing-config", "verifier-bug"],
)
def test_play_names_the_authors_file_and_line_and_prints_the_traceback_from_there(task, failed, line):
    done = play(task)
    assert done.returncode == 1, done.stderr
    assert failed in done.stdout
    assert "reward: None (an env failure is never trained on)" in done.stdout
    trace = done.stdout.split("the env's traceback:\nTraceback (most recent call last):\n", 1)[1]
    first = trace.splitlines()[0]
    assert first.startswith(f'  File "{BUGS / "db_env.py"}", line ')  # agentenv's own frames are left out
    assert line in trace
    assert done.stderr == ""  # said once, by play, not again by the episode's log


def test_a_deploy_past_its_deadline_names_the_env():
    done = play("slow-deploy", "--deploy-timeout", "0.5")
    assert done.returncode == 1
    assert (
        "failed (deadline during deploy): deploy took longer than its deadline (0.5 s): env 'slow' was deploying"
        in (done.stdout)
    )


@pytest.mark.parametrize(
    ("bundle", "task", "call"),
    [
        ("wordmath", "wm-0", ("evaluate", {"expression": "+".join(["1"] * 5000)})),
        ("wordmath", "wm-0", ("evaluate", {"expression": "9" * 400 + "*" + "9" * 400})),
        ("arith", "one-001", ("multiply", {"a": 10**300, "b": 10**300})),
    ],
    ids=["wordmath too long", "wordmath too large", "arith too large"],
)
async def test_the_example_envs_refuse_a_policys_oversized_arithmetic_as_its_mistake(bundle, task, call):
    # before, these raised RecursionError and OverflowError: under the one rule, an env crash the policy could cause
    from agentenv import load_bundle

    from tests.support.bundles import play as play_episode

    loaded = load_bundle(ROOT / "examples" / "bundles" / bundle)
    _, steps, result = await play_episode(loaded, task, [call], ["0"])
    assert steps[0].error and steps[0].text.startswith("error: the ")
    assert result.outcome == "scored"
