"""The ``subprocess`` env kind: the fake env as a real program speaking JSON lines (fake_proc.py)."""

from __future__ import annotations

import os

import pytest
from agentenv import load_bundle

from tests.support import running, until
from tests.support.bundles import copy_bundle, patch, play


def test_its_tools_are_listed_at_load_by_asking_the_program(fake_bundle):
    assert [t.name for t in fake_bundle.env_tools["proc"]] == ["echo", "fail", "die", "spawn", "stall"]
    echo = next(t for t in fake_bundle.env_tools["proc"] if t.name == "echo")
    assert echo.parameters["required"] == ["text"]


async def test_a_tool_call_is_answered_by_the_program_and_the_episode_is_scored(fake_bundle, ledger):
    _, steps, result = await play(fake_bundle, "proc-echo", [("echo", {"text": "sub"})], ["sub"])
    assert (steps[0].text, steps[0].error) == ("sub", False)
    assert (result.outcome, result.reward) == ("scored", 1.0)
    assert (ledger.count("deploy"), ledger.count("teardown")) == (1, 1)


async def test_an_error_answer_from_the_program_goes_back_to_the_model(fake_bundle):
    _, steps, result = await play(fake_bundle, "proc-echo", [("fail", {}), ("echo", {"text": "sub"})], ["sub"])
    assert (steps[0].text, steps[0].error, steps[0].done) == ("error: this tool always refuses", True, False)
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_arguments_are_checked_against_the_programs_schema_before_it_sees_them(fake_bundle):
    _, steps, _ = await play(fake_bundle, "proc-echo", [("echo", {"txt": "sub"})])
    assert steps[0].error
    assert "$: 'text' is a required property" in steps[0].text


async def test_the_program_dying_fails_the_episode_as_a_crash_with_its_stderr(fake_bundle):
    _, steps, result = await play(fake_bundle, "proc-echo", [("die", {})], ["sub"])
    assert steps[0].done
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("crash", "tool")
    assert "exited during 'call' (exit code 3)" in result.failure.message
    assert "fake_proc: dying on purpose" in result.failure.message


async def test_teardown_kills_a_child_the_program_spawned(fake_bundle, ledger):
    _, steps, result = await play(fake_bundle, "proc-echo", [("spawn", {})])
    marker = steps[0].text
    assert f"child {marker}" in ledger.events()
    assert result.outcome == "unscored"
    await until(lambda: not running(marker))
    assert ledger.count("teardown") == 1


async def test_a_program_that_writes_something_else_than_json_crashes_the_episode(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "fake_proc.py", 'out["result"] = args["text"]', 'print("debug: echoing"); out["result"] = 1')
    bundle = load_bundle(bundle_dir)
    _, _, result = await play(bundle, "proc-echo", [("echo", {"text": "sub"})])
    assert (result.outcome, result.failure.kind) == ("failed", "crash")
    assert "which is not a JSON answer; write only answers to stdout and logs to stderr" in result.failure.message


def test_a_program_that_does_not_start_is_refused_at_load(tmp_path):
    from agentenv import BundleError

    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "bundle.yaml", "command: [python, fake_proc.py]", "command: [python, no_such_proc.py]")
    with pytest.raises(BundleError) as info:
        load_bundle(bundle_dir)
    problem = info.value.problems[0]
    assert (problem.file, problem.field) == ("bundle.yaml", "envs.proc")
    assert "cannot list its tools" in problem.message
    assert "no_such_proc.py" in problem.message


async def test_the_program_gets_the_envs_variables(tmp_path, ledger):
    bundle_dir = copy_bundle(tmp_path)
    other = tmp_path / "other-ledger.txt"
    patch(
        bundle_dir / "bundle.yaml",
        "command: [python, fake_proc.py]",
        f"command: [python, fake_proc.py]\n    env: {{AGENTENV_FAKE_LEDGER: '{other}'}}",
    )
    patch(bundle_dir / "bundle.yaml", "write: [$AGENTENV_FAKE_LEDGER]", f"write: ['{other}']")  # its sandbox's
    bundle = load_bundle(bundle_dir)
    await play(bundle, "proc-echo", [("echo", {"text": "sub"})], ["sub"])
    assert "deploy" in other.read_text()
    assert ledger.count("deploy") == 0
    assert os.environ["AGENTENV_FAKE_LEDGER"] == str(ledger.path)
