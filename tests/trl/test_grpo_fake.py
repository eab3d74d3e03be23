"""TRL's GRPOTrainer on the fake bundle: several toolsets (dict mode), an env that fails, a tool past its deadline.

One GRPO run of two steps covers four tasks exactly once each (2 prompts x 2 rollouts per step): ``echo`` and
``two-turn`` (toolset ok), ``no-add`` (ok without add) and ``deploy-fails`` (an env whose deploy fails). The tiny
model is fitted first to a script per task; on ``no-add`` it calls ``hang``, which the server cuts off after its
one-second tool deadline.
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime
from typing import Any

import pytest
from agentenv import record
from agentenv_trl import AgentEnv
from datasets import Dataset

from tests.support.trl import FAKE, is_nan, logged, script, tool_calls, warm_and_train

SCRIPTS = {
    "echo": [[("echo", {"text": "ping"}), ("end_turn", {"reply": "ping"})]],
    "two-turn": [[("end_turn", {"reply": "hello"})], [("end_turn", {"reply": "goodbye"})]],
    "no-add": [[("hang", {})]],
    "deploy-fails": [[("echo", {"text": "x"})]],
}
CLASSES = {
    "echo": "fake:ok",
    "two-turn": "fake:ok",
    "no-add": "fake:ok-without-add",
    "deploy-fails": "fake:deploy_fails",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    records = tmp_path_factory.mktemp("records")
    with AgentEnv.local(FAKE, tool_timeout=1.0, record=records) as env:
        rows = {r["task_id"]: r for r in env.dataset if r["task_id"] in SCRIPTS}
        conversations = [script(env, rows[task], turns) for task, turns in SCRIPTS.items()]
        env.results.clear()
        # the warm-up's episodes may end later (when their instance is reset or closed): the run's are those after
        after = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        trainer, steps = warm_and_train(
            env,
            conversations,
            Dataset.from_list(list(rows.values())),
            tmp_path_factory.mktemp("fake"),
            warm_steps=200,
            batch_size=4,
        )
    # closed: every episode is torn down (a rollout's episode ends when its instance is reset or closed) and the
    # server's recorder has written what it had
    env.played_records = [r for r in record.read(records) if r["started"] > after]  # the run's, not the warm-up's
    yield env, trainer, steps


def rollouts(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rollout of the run: its task (from the prompt), completion, reward per column and advantage."""
    prompts = {r["prompt"][-1]["content"]: task for task, r in _rows().items()}
    out = []
    for step in steps:
        for i, prompt in enumerate(step["prompts"]):
            task = next(t for text, t in prompts.items() if text in prompt[-1]["content"])
            out.append(
                {
                    "task": task,
                    "completion": step["completions"][i],
                    "advantage": step["advantages"][i],
                    "rewards": {name: values[i] for name, values in step["rewards"].items()},
                }
            )
    return out


def _rows() -> dict[str, Any]:
    from agentenv import load_bundle

    bundle = load_bundle(FAKE)
    return {t: {"prompt": [{"content": bundle.task(t).turns[0].prompt}]} for t in SCRIPTS}


def test_each_task_was_played_twice_in_two_steps(run: Any) -> None:
    _, trainer, steps = run
    assert trainer.state.global_step == 2
    assert sorted(r["task"] for r in rollouts(steps)) == sorted([*SCRIPTS] * 2)


def test_the_server_recorded_one_record_per_rollout_with_its_calls_and_outcome(run: Any) -> None:
    env, _, steps = run
    played = env.played_records
    assert len(played) == len(rollouts(steps)) == 8
    assert sorted(r["task"] for r in played) == sorted(["echo", "two-turn", "no-add", "deploy-fails"] * 2)
    assert {r["client"] for r in played} == {"trl"} and {r["attempt"] for r in played} == {1}
    for r in played:
        if r["task"] == "deploy-fails":
            assert (r["outcome"], r["reward"], r["failure"]["kind"]) == ("failed", None, "deploy")
        if r["task"] == "no-add" and r["outcome"] == "failed":
            assert r["failure"]["kind"] == "deadline" and r["turns"][0]["calls"] == []
    rewards = sorted(r["reward"] for r in played if r["outcome"] == "scored")
    assert rewards == sorted(e.reward for step in steps for e in step["episodes"] if e.reward is not None)


def test_dict_mode_gives_each_toolset_its_class_its_tools_and_its_reward_column(run: Any) -> None:
    _, trainer, steps = run
    assert {"fake:ok", "fake:ok-without-add", "fake:deploy_fails"} <= set(trainer.reward_func_names)
    tools = {name: {t.__name__ for t in methods} for name, methods in trainer._env_tools.items()}
    assert "add" in tools["ok"] and "add" not in tools["ok-without-add"]
    for rollout in rollouts(steps):
        others = [v for name, v in rollout["rewards"].items() if name != CLASSES[rollout["task"]]]
        assert all(is_nan(v) for v in others)  # only the row's own class scored it


def test_rewards_reach_trl_through_get_reward(run: Any) -> None:
    _, trainer, steps = run
    for step in steps:
        from_env = sorted(r.reward for r in step["episodes"] if r.reward is not None)
        from_trl = sorted(v for values in step["rewards"].values() for v in values if not is_nan(v))
        assert from_trl == pytest.approx(from_env)
    for step, mean in zip(steps, logged(trainer, "reward")):
        scored = [r.reward for r in step["episodes"] if r.reward is not None]
        assert mean == pytest.approx(statistics.fmean(scored))  # the unscored rows are out of the mean


def test_a_failed_episode_gives_nan_and_is_excluded(run: Any) -> None:
    _, _, steps = run
    failed = [r for r in rollouts(steps) if r["task"] == "deploy-fails"]
    assert len(failed) == 2
    for rollout in failed:
        assert all(is_nan(v) for v in rollout["rewards"].values())
        assert rollout["advantage"] == 0.0  # no learning signal either way
    outcomes = {(r.task_id, r.outcome, r.failure.kind if r.failure else None) for s in steps for r in s["episodes"]}
    assert ("deploy-fails", "failed", "deploy") in outcomes


def test_a_tool_past_its_deadline_gives_nan(run: Any) -> None:
    _, _, steps = run
    hung = [r for r in rollouts(steps) if r["task"] == "no-add" and ("hang", {}) in tool_calls(r["completion"])]
    assert hung, "the fitted model did not call hang"
    for rollout in hung:
        assert is_nan(rollout["rewards"]["fake:ok-without-add"])
        assert rollout["advantage"] == 0.0
        answer = next(m for m in rollout["completion"] if m.get("role") == "tool" and m["name"] == "hang")
        assert "deadline" in answer["content"]  # what the model was told
    failures = [r.failure for s in steps for r in s["episodes"] if r.task_id == "no-add" and r.failure]
    assert {(f.kind, f.stage) for f in failures} == {("deadline", "tool")}


def test_the_second_turns_prompt_is_handed_over(run: Any) -> None:
    _, _, steps = run
    two_turn = [r for r in rollouts(steps) if r["task"] == "two-turn"]
    handed = [m["content"] for r in two_turn for m in r["completion"] if m.get("role") == "tool"]
    assert "Now say goodbye." in handed, [r["completion"] for r in two_turn]
