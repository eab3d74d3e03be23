"""What can be known of an author's mistake at load is said at load (a verifier's env, an agent command's
placeholder, an unknown JSON Schema keyword), and what a subprocess env or a sync check gets wrong at play is
the env's fault, named, or made to work (the envbugs and qa fixture bundles, the real ``agentenv`` program)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.cli import main

from tests.support import ROOT
from tests.support.bundles import line_of, only_problem, refused

AGENTENV = Path(sys.executable).with_name("agentenv")
QA = ROOT / "tests" / "fixtures" / "bundles" / "qa"
BUGS = ROOT / "tests" / "fixtures" / "bundles" / "envbugs"


@pytest.fixture
def qa_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "qa"
    shutil.copytree(QA, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_a_verifiers_env_outside_the_toolset_is_refused_at_load(qa_copy):
    task = qa_copy / "tasks" / "good.yaml"
    task.write_text(
        task.read_text().replace("check: store_env:colour_is_blue}", "check: store_env:colour_is_blue, env: stor}")
    )
    problem = only_problem(refused(qa_copy))
    assert (problem.file, problem.field, problem.line) == (
        "tasks/good.yaml",
        "turns[0].verifiers[0].env",
        line_of(task, "env: stor"),
    )
    assert problem.message == (
        "python verifier 'stored': env 'stor' is not in the task's toolset (its envs: store); name one of them, or "
        "add it to toolset.envs"
    )


def test_a_placeholder_typo_in_an_agent_command_is_refused_at_load(qa_copy):
    manifest = qa_copy / "bundle.yaml"
    manifest.write_text(
        manifest.read_text() + 'agents:\n  solver:\n    kind: process\n    command: [python, "{bundel}/solve.py", '
        "'{prompt}', '{\"json\": 1}']\n"
    )
    problem = only_problem(refused(qa_copy))
    assert (problem.file, problem.field) == ("bundle.yaml", "agents.solver.command[1]")
    assert problem.line == line_of(manifest, "{bundel}")
    assert problem.message.startswith("unknown placeholder {bundel}; the placeholders are {bundle}, {prompt}, {system}")


def test_an_unknown_schema_keyword_is_a_warning_naming_the_tool_and_path_and_strict_refuses_it(qa_copy, capsys):
    env = qa_copy / "store_env.py"
    env.write_text(
        env.read_text().replace(
            '"properties": {"key": {"type": "string"}}, "required"',
            '"properties": {"key": {"type": "string", "maxLenght": 9}}, "required"',
        )
    )
    said = (
        "bundle.yaml:6: envs.store: tool 'get' of store_env:Store: its argument schema, at properties.key: 'maxLenght' "
        "is not a keyword of JSON Schema draft 2020-12; did you mean 'maxLength'?"
    )
    bundle = load_bundle(qa_copy)
    assert [str(w) for w in bundle.warnings] == [said]
    assert main(["check", str(qa_copy)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {said}\n" in out and "loads, with 1 warning(s) (--strict refuses)" in out
    assert main(["check", str(qa_copy), "--strict"]) == 2
    assert said in capsys.readouterr().err


def test_a_good_bundle_has_no_warnings():
    for name in ("inbox", "arith", "wordmath"):
        assert load_bundle(ROOT / "examples" / "bundles" / name).warnings == []


def play(task: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTENV, "play", BUGS, task, "--reference"], capture_output=True, text=True, timeout=120)


def test_a_subprocess_answer_without_result_is_the_envs_protocol_error_naming_the_program():
    done = play("no-result")
    assert done.returncode == 1
    assert (
        "failed (crash during tool): tool 'forget': env program ['python', 'table_proc.py'] answered 'call' with ok "
        "and no 'result':" in done.stdout
    )
    assert '{"id": 3, "ok": true, "result": ...} (null for nothing)' in done.stdout


def test_a_sync_check_of_a_subprocess_env_gets_its_answers():
    # before, env.call gave the check a coroutine that was never awaited; the comparison was False and scored 0
    done = play("sync-check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reward: 1" in done.stdout
    assert "never awaited" not in done.stderr
