"""The ``agentenv`` commands on the example bundles: in process (``main``) and as real programs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.cli import main
from agentenv.plugins import plugins

from tests.support import ARITH, FAKE, INBOX

AGENTENV = Path(sys.executable).with_name("agentenv")  # the console script of the test environment


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    """The body rows of the first table in ``out`` (split on whitespace)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line.replace(" ", "")) == {"-"}) + 1
    body = []
    for line in lines[start:]:
        if not line.strip():
            break
        body.append(line.split())
    return body


# --- agentenv tasks ---------------------------------------------------------------------------


def test_tasks_lists_every_task_with_its_split_index_turns_and_toolset_key(capsys):
    code, out, _ = run(capsys, "tasks", ARITH)
    assert code == 0
    bundle = load_bundle(ARITH)
    assert rows(out) == [
        [t.id, t.split, str(bundle.index_of(t)), str(len(t.turns)), bundle.toolset_key(t)] for t in bundle.tasks
    ]
    assert out.splitlines()[0].split() == ["id", "split", "index", "turns", "toolset"]
    assert "212 tasks, 1 toolset, splits: train, eval" in out


def test_tasks_of_one_split(capsys):
    code, out, _ = run(capsys, "tasks", INBOX, "--split", "eval")
    assert code == 0
    table = rows(out)
    assert table and {row[1] for row in table} == {"eval"}
    assert [row[2] for row in table] == [str(i) for i in range(len(table))]


def test_tasks_of_a_split_that_does_not_exist_is_an_error_naming_the_splits(capsys):
    code, out, err = run(capsys, "tasks", ARITH, "--split", "test")
    assert code == 2
    assert "error: no split 'test'; the splits are train, eval" in err
    assert out == ""


def test_tasks_of_a_broken_bundle_prints_the_refusal(capsys, tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: broken\ntasks: tasks/*.yaml\nenvs: {calc: {kind: docker}}\n")
    code, _, err = run(capsys, "tasks", tmp_path)
    assert code == 2
    assert "error: bundle 'broken' was refused" in err
    assert "bundle.yaml:3: envs.calc.kind: unknown env kind 'docker'" in err


# --- agentenv play ----------------------------------------------------------------------------


def test_play_reference_plays_the_solution_and_prints_tool_results_scores_and_reward(capsys):
    task = load_bundle(ARITH).task("two-001")
    first, second = (turn.calls[0] for turn in task.solution)
    code, out, _ = run(capsys, "play", ARITH, "two-001", "--reference")
    assert code == 0
    assert f'call {first.tool} {{"a": {first.args["a"]}, "b": {first.args["b"]}}}\n  = {task.solution[0].reply}' in out
    assert f'call {second.tool} {{"a": {task.solution[0].reply}, "b": {second.args["b"]}}}' in out
    assert f"[turn 2] {task.turns[1].prompt}" in out
    assert "score answer-1: 1\nscore answer-2: 1\nreward: 1" in out


def test_play_reference_on_every_inbox_task_earns_reward_one(capsys):
    for task in load_bundle(INBOX).tasks:
        code, out, _ = run(capsys, "play", INBOX, task.id, "--reference")
        assert code == 0
        assert out.rstrip().endswith("reward: 1"), task.id


def test_play_script_plays_the_calls_and_replies_of_a_json_file(capsys, tmp_path):
    first = {
        "calls": [{"tool": "search", "args": {"query": "budget"}}, {"tool": "read_email", "args": {"id": "zz"}}],
        "reply": "Dana",
    }
    second = {"calls": [{"tool": "delete_email", "args": {"id": "m1"}}], "reply": "I do not know"}
    script = tmp_path / "q-001.json"
    script.write_text(json.dumps([first, second]))
    code, out, _ = run(capsys, "play", INBOX, "q-001", "--script", script)
    assert code == 0
    assert '  call search {"query": "budget"}\n  = ["m1"]' in out
    assert "  ! error: no email 'zz'; the ids are m1, m2, m3" in out
    assert "  ! unknown tool 'delete_email'; the tools are: list_emails, search, read_email" in out
    assert "score answer-1: 1\nscore answer-2: 0\nreward: 0.5" in out


def test_play_script_with_fewer_turns_than_the_task_replies_nothing_to_the_rest(capsys, tmp_path):
    script = tmp_path / "short.json"
    script.write_text(json.dumps({"turns": [{"calls": [], "reply": "Dana"}]}))
    code, out, _ = run(capsys, "play", INBOX, "q-001", "--script", script)
    assert code == 0
    assert "[turn 2] What amount did they ask for?\n  reply: \n" in out
    assert "score answer-2: 0\nreward: 0.5" in out  # no answer is the policy's doing: scored


def test_play_a_task_whose_env_fails_prints_the_failure_and_exits_1(capsys):
    code, out, _ = run(capsys, "play", FAKE, "deploy-fails", "--reference")
    assert code == 1
    assert (
        "failed (deploy during deploy): env 'deploy_fails': RuntimeError: the fake deploy failed on purpose "
        "(fake_env.py:65 in deploy)" in out
    )
    assert "reward: None (an env failure is never trained on)" in out


def test_play_a_script_that_is_not_json_names_the_file_and_the_line(capsys, tmp_path):
    script = tmp_path / "bad.json"
    script.write_text('[\n  {"calls": [],\n   "reply": "x",}\n]\n')
    code, out, err = run(capsys, "play", INBOX, "q-001", "--script", script)
    assert code == 2
    # json's own words for the mistake change between Pythons (3.13: "Illegal trailing comma..."); the file and line not
    assert re.search(rf"error: --script {re.escape(str(script))}: not JSON \(.+ at line 3\)", err), err
    assert 'write a list of turns [{"calls": [{"tool": ..., "args": {...}}], "reply": ...}]' in err
    assert "[turn 1]" not in out  # refused before the episode started


def test_play_a_script_of_the_wrong_shape_says_what_it_expects(capsys, tmp_path):
    script = tmp_path / "shape.json"
    script.write_text('{"calls": []}')
    code, _, err = run(capsys, "play", INBOX, "q-001", "--script", script)
    assert code == 2
    assert f"error: --script {script}: expected a list of turns, each {{calls: [...], reply: ...}}" in err


def test_play_a_script_that_does_not_exist_says_so(capsys, tmp_path):
    code, _, err = run(capsys, "play", INBOX, "q-001", "--script", tmp_path / "missing.json")
    assert code == 2
    assert "cannot be read (No such file or directory)" in err


def test_play_an_unknown_task_says_how_to_list_them(capsys):
    code, _, err = run(capsys, "play", ARITH, "one-999", "--reference")
    assert code == 2
    assert f"error: bundle 'arith' has no task 'one-999'; list them with: agentenv tasks {ARITH}" in err


def test_play_from_the_terminal_reads_commands_from_stdin(monkeypatch, capsys):
    lines = iter(["tools", 'call search {"query": "budget"}', "call read_email {bad", "reply Dana", "reply 4,200"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    code, out, _ = run(capsys, "play", INBOX, "q-001")
    assert code == 0
    assert "  search: Ids of the emails that contain every word of the query." in out
    assert "  arguments are not JSON" in out
    assert "reward: 1" in out


# --- agentenv check ---------------------------------------------------------------------------


def test_check_deploys_one_episode_per_toolset_of_a_good_bundle(capsys):
    code, out, _ = run(capsys, "check", ARITH)
    assert code == 0
    assert "bundle 'arith': 212 tasks in train, eval; loads cleanly" in out
    table = rows(out)
    assert len(table) == 1
    assert table[0][:3] == [load_bundle(ARITH).toolset_key(load_bundle(ARITH).tasks[0]), "212", "one-001"]
    assert table[0][-1] == "ok"


def test_check_reports_the_failing_toolsets_of_the_fake_bundle_and_exits_1(capsys):
    code, out, _ = run(capsys, "check", FAKE, "--deploy-timeout", "0.5")
    assert code == 1
    bundle = load_bundle(FAKE)
    keys = set(bundle.toolset_keys.values())
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and line.split()[0] in keys}
    assert set(lines) == set(bundle.toolset_keys.values())  # one row per toolset key
    failing = {key for key, line in lines.items() if "FAILED" in line}
    assert failing == {bundle.toolset_key(bundle.task("deploy-fails")), bundle.toolset_key(bundle.task("deploy-hangs"))}
    assert (
        "FAILED: env 'deploy_fails': RuntimeError: the fake deploy failed on purpose (fake_env.py:65 in deploy)"
        in lines[bundle.toolset_key(bundle.task("deploy-fails"))]
    )
    assert (
        "FAILED: deploy took longer than its deadline (0.5 s)" in lines[bundle.toolset_key(bundle.task("deploy-hangs"))]
    )
    proc = lines[bundle.toolset_key(bundle.task("proc-echo"))]
    assert "echo, fail, die, spawn" in proc
    assert proc.split()[-1] == "ok"


# --- agentenv plugins and plugin commands ---------------------------------------------------


def test_plugins_lists_plugins_hooks_and_the_integration_range_against_the_installed_version(capsys):
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    table = {row[0]: row for row in rows(out)}
    assert table["testplugin"][1:3] == ["agentenv-testplugin", version("agentenv-testplugin")]
    assert "verifier_kinds" in " ".join(table["testplugin"])
    for name in ("server", "trl", "verl", "harness"):
        assert table[name][1] == f"agentenv-{name}"
    integration = next(line for line in out.splitlines() if line.startswith("testtrainer"))
    assert integration.split() == ["testtrainer", "pluggy", ">=1.0,<99", version("pluggy"), "ok"]


def test_hook_agentenv_cli_commands_adds_a_subcommand(capsys):
    code, out, _ = run(capsys, "hello", "world")
    assert (code, out) == (0, "hello world\n")


def test_no_command_prints_the_help_with_every_command(capsys):
    code, out, _ = run(capsys)
    assert code == 2
    for command in ("tasks", "play", "check", "plugins", "serve", "hello"):
        assert command in out


def test_the_agentenv_program_lists_tasks(tmp_path):
    done = subprocess.run([AGENTENV, "tasks", INBOX], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "8 tasks, 1 toolset, splits: train, eval" in done.stdout


def test_python_dash_m_agentenv_plays_a_reference_solution(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "agentenv", "play", ARITH, "one-001", "--reference"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("reward: 1")


def test_the_agentenv_program_reports_a_broken_plugin_by_name_and_still_runs(tmp_path):
    env = {**os.environ, "AGENTENV_TESTPLUGIN_BROKEN": "1"}
    done = subprocess.run([AGENTENV, "plugins"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = "plugin 'testplugin-broken' (agentenv-testplugin 0.0.1) was left out: importing agentenv_testplugin.broken"
    assert f"left out (1; everything else works):\n  {said}" in done.stdout
    assert done.stderr.count(said) == 1  # and warned once on stderr
    assert "testtrainer" in done.stdout  # the good plugin of the same distribution is there


def test_plugins_check_exits_1_when_a_plugin_was_left_out(tmp_path):
    env = {**os.environ, "AGENTENV_TESTPLUGIN_BROKEN": "1"}
    done = subprocess.run([AGENTENV, "plugins", "--check"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1
    assert "testplugin-broken" in done.stdout
    done = subprocess.run([AGENTENV, "plugins", "--check"], capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")


def test_every_command_warns_once_about_a_plugin_left_out_and_runs(tmp_path):
    env = {**os.environ, "AGENTENV_TESTPLUGIN_DUPE": "1"}
    done = subprocess.run([AGENTENV, "play", ARITH, "one-001", "--reference"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("reward: 1")
    assert done.stderr.count("plugin 'testplugin-dupe'") == 1
    assert "the verifier kind 'short' is registered by 'testplugin' (agentenv-testplugin 0.0.1)" in done.stderr


def test_the_agentenv_program_refuses_a_bundle_with_exit_code_2(tmp_path):
    done = subprocess.run([AGENTENV, "check", tmp_path / "nowhere"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert "missing file (the folder does not exist)" in done.stderr


@pytest.mark.parametrize("command", ["tasks", "play", "check", "plugins"])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert f"usage: agentenv {command}" in capsys.readouterr().out


def test_the_commands_said_to_come_with_other_wheels_are_the_ones_those_wheels_register():
    from importlib.metadata import distribution

    from agentenv.cli import ELSEWHERE

    ours = ("agentenv-server", "agentenv-trl", "agentenv-verl", "agentenv-harness", "agentenv-docker")
    tops = {
        wheel: {e.value.split(".")[0] for e in distribution(wheel).entry_points if e.group == "agentenv"}
        for wheel in ours
    }
    registered = {
        name: wheel
        for name, command in plugins().cli_commands().items()
        for wheel in ours
        if command.run.__module__.split(".")[0] in tops[wheel]
    }
    assert registered == dict(ELSEWHERE)  # every command of another agentenv wheel, and only those


def test_the_version_option_names_every_agentenv_wheel_installed_and_the_wire_protocol():
    done = subprocess.run([AGENTENV, "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for wheel in (
        "agentenv-core",
        "agentenv-server",
        "agentenv-trl",
        "agentenv-verl",
        "agentenv-harness",
        "agentenv-docker",
    ):
        assert f"{wheel} {version(wheel)}" in lines
    assert lines[-1] == "wire protocol 2"


def test_a_reader_that_goes_away_ends_the_command_quietly():
    # agentenv tasks BUNDLE | head: the pipe is closed before anything is written
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([AGENTENV, "tasks", INBOX], stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")
