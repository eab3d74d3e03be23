"""The harness's dataset and plan: a row per task to train, tasks left out with a warning, refusals."""

from __future__ import annotations

import logging

import pytest
from agentenv import load_bundle
from agentenv.errors import AgentEnvError
from agentenv_harness import prompt_rows
from agentenv_harness.tasks import plan, task_of_prompt

from tests.support.bundles import copy_bundle, patch
from tests.support.harness import HARNESS, PLACEHOLDER


def test_prompt_rows_has_a_row_per_task_naming_it_in_a_system_line():
    rows = prompt_rows(HARNESS, "train")
    assert rows["task_id"] == ["direct", "smoke", "multiply", "two-turn"]
    system, user = rows[1]["prompt"]
    assert system["role"] == "system" and system["content"].splitlines()[0] == "agentenv task: harness/smoke"
    assert user == {"role": "user", "content": load_bundle(HARNESS).task("smoke").turns[0].prompt}
    assert task_of_prompt(rows[1]["prompt"], load_bundle(HARNESS)) == "smoke"


def test_a_prompt_naming_another_bundles_task_is_refused(tmp_path):
    other = copy_bundle(tmp_path, HARNESS)
    patch(other / "bundle.yaml", "name: harness", "name: elsewhere")
    prompt = prompt_rows(other, "train")[0]["prompt"]
    with pytest.raises(AgentEnvError) as info:
        task_of_prompt(prompt, load_bundle(HARNESS))
    assert "names task 'direct' of bundle 'elsewhere', but this factory serves bundle 'harness'" in str(info.value)


def test_a_prompt_naming_no_task_is_refused_with_the_fix():
    with pytest.raises(AgentEnvError, match=r"names no task .* build the dataset with agentenv_harness.prompt_rows"):
        task_of_prompt([{"role": "user", "content": "hello"}], load_bundle(HARNESS))


def test_tasks_that_cannot_be_trained_are_left_out_with_a_warning_naming_each(caplog):
    with caplog.at_level(logging.WARNING, logger="agentenv_harness"):
        kept, left = plan(load_bundle(HARNESS), split="leftout", environ={})
    assert [t.id for t in kept] == ["kept"]
    reasons = {item.task_id: item.reason for item in left}
    assert reasons["no-solver"].startswith("it deploys no solver")
    assert (
        reasons["judge-on-policy"]
        == "its judge step points at the policy (only a solver may call the model being trained)"
    )
    assert reasons["user-on-policy"].startswith("its user step points at the policy")
    assert (
        reasons["judge-key-unset"]
        == "its judge 'judged' reads its key from $AGENTENV_TEST_UNSET_JUDGE_KEY, which is not set"
    )
    assert "agentenv-no-such-agent-program" in reasons["agent-absent"] and "not installed" in reasons["agent-absent"]
    for task_id in reasons:
        assert any(task_id in record.getMessage() and "left out" in record.getMessage() for record in caplog.records)


def test_a_judge_on_the_engine_being_trained_is_its_solver_and_left_out(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "tasks" / "judged.yaml", f"{{base_url: '{PLACEHOLDER}', model: tiny/judge}}",
          "{base_url: 'http://127.0.0.1:8000/v1', model: Qwen/Qwen3-8B}")  # fmt: skip
    kept, left = plan(load_bundle(bundle), split="judged", engine=("http://127.0.0.1:8000", "Qwen/Qwen3-8B"))
    assert [t.id for t in kept] == ["user-sim"]
    assert (
        left[0].reason
        == "its judge step is its solver: it asks Qwen/Qwen3-8B at http://127.0.0.1:8000/v1, the model being trained"
    )


def test_a_bundle_with_no_task_to_train_is_refused_with_the_reasons():
    with pytest.raises(AgentEnvError) as info:
        prompt_rows(HARNESS, "faults", agent="absent")
    message = str(info.value)
    assert message.startswith("split 'faults' of bundle 'harness' has no task to train with the harness:")
    assert (
        "  - crash: program 'agentenv-no-such-agent-program' of agent 'absent' is not installed (not on PATH)"
        in message
    )


def test_agent_swaps_every_solver_and_an_unknown_one_names_both_lists():
    kept, _ = plan(load_bundle(HARNESS), split="leftout", agent="chat", environ={})
    assert "no-solver" in [t.id for t in kept] and "agent-absent" in [t.id for t in kept]
    with pytest.raises(AgentEnvError) as info:
        plan(load_bundle(HARNESS), agent="claude-cod")
    assert "no agent 'claude-cod': bundle 'harness' has agents absent, chat, claude" in str(info.value)
    assert "the installed agent kinds are claude-code, codex, mini-swe-agent, opencode" in str(info.value)
