"""TRL's own GRPOTrainer trains on a container env: two steps on the CPU, a tiny model built here, every rollout a
two-turn episode whose tool calls run in a container of its own."""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv_trl import AgentEnv

from tests.support.containers import BOX, wait_until_none
from tests.support.trl import is_nan, logged, script, warm_and_train


@pytest.fixture(scope="module")
def run(images: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two GRPO steps of 2 prompts x 2 rollouts on the box bundle's train split, served in this process.

    The tiny model is first fitted to the reference solutions (read the note, answer it), so that its rollouts
    call the container's tool and reach the second turn.
    """
    with AgentEnv.local(BOX) as env:
        rows = {r["task_id"]: r for r in env.dataset}
        conversations = [
            script(
                env,
                rows[t.id],
                [[*((c.tool, c.args) for c in s.calls), ("end_turn", {"reply": s.reply})] for s in t.solution],
            )
            for t in load_bundle(BOX).split("train")
        ]
        env.results.clear()
        trainer, steps = warm_and_train(
            env,
            conversations,
            env.dataset,
            tmp_path_factory.mktemp("box"),
            warm_steps=150,
            batch_size=4,
            max_completion_length=160,
            max_tool_calling_iterations=6,
        )
    yield trainer, steps, wait_until_none(os.getpid())


def test_two_training_steps_ran_on_container_episodes(run: Any) -> None:
    trainer, steps, _ = run
    assert trainer.state.global_step == 2
    assert [len(s["episodes"]) for s in steps] == [4, 4]  # 2 prompts x 2 rollouts, each a real episode
    assert all(r.outcome == "scored" for s in steps for r in s["episodes"])


def test_the_rewards_trl_trains_on_are_the_container_envs(run: Any) -> None:
    trainer, steps, _ = run
    for step, logged_mean in zip(steps, logged(trainer, "reward"), strict=True):
        from_env = [r.reward for r in step["episodes"]]
        # one reward column per toolset (the eval split's probe has its own): a row's value is in its own column
        from_trl = [v for column in step["rewards"].values() for v in column if not is_nan(v) and v is not None]
        assert sorted(from_trl) == pytest.approx(sorted(from_env))
        assert logged_mean == pytest.approx(statistics.fmean(from_env))
    assert any(r.reward == 1.0 for s in steps for r in s["episodes"])  # the warm start answers both turns


def test_the_notes_came_from_the_containers(run: Any) -> None:
    _, steps, _ = run
    answers = [m["content"] for s in steps for c in s["completions"] for m in c if m.get("name") == "read_note"]
    assert answers and set(answers) <= {"4217", "Lisbon", "a grey cat"} | {a for a in answers if "no note" in a}
    assert {"4217", "Lisbon", "a grey cat"} & set(answers)


def test_no_container_is_left_after_training(run: Any) -> None:
    assert run[2] == {}
