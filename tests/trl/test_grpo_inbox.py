"""TRL's GRPOTrainer trains on the inbox example through AgentEnv: two steps on the CPU, a tiny model built here."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv_trl import AgentEnv
from agentenv_trl.tiny import tiny_model, tiny_tokenizer

from tests.support.trl import INBOX, is_nan, logged, script, trainer_for, warm_and_train

SECOND_PROMPTS = {
    t.turns[1].prompt for t in load_bundle(INBOX).tasks if len(t.turns) > 1
}  # what end_turn must hand over after the first answer


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two GRPO steps of 2 prompts x 2 rollouts on the inbox's train split.

    The tiny model is first fitted to answer each turn at once with end_turn and the reference reply (short
    conversations it learns in seconds, so that its rollouts reach the second turn).
    """
    with AgentEnv.local(INBOX) as env:
        rows = {r["task_id"]: r for r in env.dataset}
        conversations = [
            script(env, rows[t.id], [[("end_turn", {"reply": s.reply})] for s in t.solution])
            for t in load_bundle(INBOX).split("train")
        ]
        env.results.clear()
        trainer, steps = warm_and_train(
            env,
            conversations,
            env.dataset,
            tmp_path_factory.mktemp("inbox"),
            warm_steps=150,
            batch_size=6,
            max_completion_length=160,
            max_tool_calling_iterations=6,
        )
        yield env, trainer, steps


def test_two_training_steps_ran(run: Any) -> None:
    _, trainer, steps = run
    assert trainer.state.global_step == 2
    assert [s["step"] for s in steps] == [1, 2]
    assert all(len(s["episodes"]) == 4 for s in steps)  # 2 prompts x 2 rollouts, each a real episode


def test_rewards_reach_trl_through_get_reward(run: Any) -> None:
    _, trainer, steps = run
    for step, logged_mean in zip(steps, logged(trainer, "rewards/inbox/mean")):
        from_env = [r.reward for r in step["episodes"]]
        from_trl = step["rewards"]["inbox"]
        assert sorted(from_trl) == pytest.approx(sorted(from_env))
        assert logged_mean == pytest.approx(statistics.fmean(from_env))


def test_the_second_turns_prompt_is_handed_over(run: Any) -> None:
    _, _, steps = run
    handed = [
        m["content"]
        for s in steps
        for c in s["completions"]
        for m in c
        if m.get("role") == "tool" and m.get("name") == "end_turn"
    ]
    assert set(handed) & SECOND_PROMPTS


def test_environment_instances_are_reused_across_rollouts(run: Any) -> None:
    env, trainer, _ = run
    pool = trainer._environment_pool[None]
    assert len(pool) == 4  # TRL's probe plus three more: one per rollout of a batch
    assert [i.episodes for i in pool] == [2, 2, 2, 2]  # each played one episode per step, on its one session
    assert set(pool) <= set(env.instances)


def test_rollouts_past_the_servers_session_limit_get_no_reward_and_say_how_to_raise_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # INFO: the capacity warning is a WARNING once per process (agentenv.logs.warn_once) and INFO after, so a test
    # that ran before in this worker (the fault scenarios' capacity row) may have had the WARNING already
    caplog.set_level("INFO", logger="agentenv.trl")
    with AgentEnv.local(INBOX, max_concurrent_envs=1) as env:
        tokenizer = tiny_tokenizer(texts=[r["prompt"][-1]["content"] for r in env.dataset])
        trainer = trainer_for(
            env, tiny_model(tokenizer, hidden_size=32, layers=1), tokenizer, env.dataset, tmp_path, max_steps=1
        )
        trainer.train()
        results = list(env.results)
    assert trainer.state.global_step == 1  # a server fault loses rollouts; it does not stop training
    lost = [r for r in results if r.outcome == "failed"]
    assert lost and all(r.failure.kind == "capacity" and r.reward is None for r in lost)
    assert len(lost) < len(results)  # the rollout that got the one session was played and scored
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "max_concurrent_envs=" in said and "MAX_CONCURRENT_ENVS" in said and "one per rollout" in said


def test_logged_rewards_are_numbers(run: Any) -> None:
    _, trainer, _ = run
    rewards = logged(trainer, "reward")
    assert len(rewards) == trainer.state.global_step == 2  # one per step (logging_steps=1): never vacuously true
    assert all(v is not None and not is_nan(v) and math.isfinite(v) for v in rewards)
