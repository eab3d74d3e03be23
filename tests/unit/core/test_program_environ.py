"""What a program started for the policy finds in its environment: an allowlist, never the server's or trainer's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.engine.agentproc import AgentDirs, AgentProcess
from agentenv.engine.agents import Launch

from tests.support import FAKE
from tests.support.bundles import copy_bundle, line_of, only_problem, patch, play, refused

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-5ecret",
    "OPENAI_API_KEY": "sk-outside",
    "HF_TOKEN": "hf-outside",
    "AGENTENV_TOKEN": "server-token",
    "GH_TOKEN": "gh-outside",
}

# a subprocess env whose one tool answers the program's whole environment
ENVIRON_PROC = """import json, os, sys
for line in sys.stdin:
    req = json.loads(line)
    out = {"id": req["id"], "ok": True}
    if req["op"] == "tools":
        out["result"] = [{"name": "environ", "description": "d", "parameters": {"type": "object", "properties": {}}}]
    elif req["op"] == "call":
        out["result"] = dict(os.environ)
    print(json.dumps(out), flush=True)
    if req["op"] == "teardown":
        break
"""


@pytest.fixture
def outside(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Keys in this process's environment, as a server's or a trainer's has them."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DB_URL", "sqlite:///db")
    return SECRETS


def _names(listing: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in listing.splitlines() if "=" in line)
    return {name: value for name, value in pairs}


def _environ_bundle(tmp_path: Path, extra: str = "") -> Path:
    bundle_dir = copy_bundle(tmp_path)
    (bundle_dir / "environ_proc.py").write_text(ENVIRON_PROC)
    patch(
        bundle_dir / "bundle.yaml",
        "defaults:",
        f"  environ:\n    kind: subprocess\n    command: [python, environ_proc.py]\n{extra}defaults:",
    )
    (bundle_dir / "tasks" / "environ.yaml").write_text(
        "id: environ\nsplit: train\ntoolset: {envs: [environ]}\nturns:\n- prompt: p\n  verifiers: "
        "[{id: a, kind: contains, answer: x}]\n"
    )
    return bundle_dir


async def test_bash_gets_path_lang_and_a_home_and_tmpdir_of_its_own_and_nothing_else(outside):
    _, steps, _ = await play(load_bundle(FAKE), "bash", [("bash", {"command": "env"})])
    seen = _names(steps[0].text)
    assert set(seen) - {"PWD", "SHLVL", "_", "AGENTENV_OWNERS"} == {"PATH", "LANG", "HOME", "TMPDIR"}
    assert not set(outside.values()) & set(seen.values())
    assert Path(seen["HOME"]).parent == Path(seen["TMPDIR"]).parent  # both in the episode's scratch folder


async def test_a_subprocess_env_gets_its_env_values_and_pass_env_names_and_no_other_variable(outside, tmp_path):
    extra = "    env: {MODE: fast}\n    pass_env: [DB_URL, NOT_SET_ANYWHERE]\n"
    bundle = load_bundle(_environ_bundle(tmp_path, extra))
    _, steps, _ = await play(bundle, "environ", [("environ", {})])
    seen = json.loads(steps[0].text)
    assert {"MODE", "DB_URL", "PATH", "LANG", "HOME", "TMPDIR"} <= set(seen)
    assert (seen["MODE"], seen["DB_URL"]) == ("fast", "sqlite:///db")
    assert not set(SECRETS) & set(seen) and "NOT_SET_ANYWHERE" not in seen


async def test_an_agent_gets_its_launch_env_and_pass_env_and_no_model_key_of_the_trainer(outside, tmp_path):
    program = "import json, os; print(json.dumps(sorted(os.environ)))"
    launch = Launch(argv=(sys.executable, "-c", program), env={"OPENAI_API_KEY": "ak"})
    exit_ = await AgentProcess(launch, AgentDirs(tmp_path / "agent"), pass_env=["DB_URL"]).run()
    names = json.loads(exit_.reply)
    assert {"OPENAI_API_KEY", "DB_URL", "HOME", "TMPDIR", "PATH", "LANG"} <= set(names)
    assert not {"AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "AGENTENV_TOKEN", "GH_TOKEN"} & set(names)


def test_a_pass_env_naming_an_endpoints_key_var_is_refused_at_its_line(tmp_path):
    bundle_dir = _environ_bundle(tmp_path, "    pass_env: [JUDGE_KEY]\n")
    (bundle_dir / "tasks" / "judged.yaml").write_text(
        "id: judged\nsplit: train\nturns:\n- prompt: p\n  verifiers: [{id: j, kind: judge, rubric: r, endpoint: "
        "{base_url: 'http://127.0.0.1:9/v1', model: m, key_var: JUDGE_KEY}}]\n"
    )
    problem = only_problem(refused(bundle_dir))
    assert (problem.file, problem.field) == ("bundle.yaml", "envs.environ.pass_env[0]")
    assert problem.line == line_of(bundle_dir / "bundle.yaml", "pass_env: [JUDGE_KEY]")
    assert "JUDGE_KEY holds an endpoint's key" in problem.message and "remove it" in problem.message


def test_a_python_env_with_pass_env_is_refused_it_has_the_servers_environment(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    target = "    target: fake_env:FakeEnv\n"
    patch(bundle_dir / "bundle.yaml", f"{target}  slow:", f"{target}    pass_env: [DB_URL]\n  slow:")
    problem = only_problem(refused(bundle_dir))
    assert problem.field == "envs.ok.pass_env" and "runs in the server process" in problem.message


def test_a_pass_env_entry_that_is_no_variable_name_is_refused(tmp_path):
    problem = refused(_environ_bundle(tmp_path, "    pass_env: ['DB-URL']\n")).problems[0]
    assert problem.field == "envs.environ.pass_env" and "'DB-URL' is not an environment variable's name" in (
        problem.message
    )


def test_an_env_named_bash_of_another_kind_is_refused(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "bundle.yaml", "  slow:\n", "  bash:\n    kind: python\n    target: fake_env:FakeEnv\n  slow:\n")
    problem = only_problem(refused(bundle_dir))
    assert problem.field == "envs.bash.kind" and "give it kind: bash" in problem.message


def test_this_process_environment_is_never_changed(outside):
    before = dict(os.environ)
    load_bundle(FAKE)
    assert dict(os.environ) == before
