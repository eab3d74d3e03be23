"""The demo's control arms: the env's reward column of TRL's own trainer is replaced while training, and only then."""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest
from agentenv import load_bundle
from agentenv_trl import AgentEnv
from agentenv_trl.controls import controlled_reward, replaced_rewards
from agentenv_trl.demo import DemoConfig, run_demo
from agentenv_trl.tiny import tiny_model, tiny_tokenizer

from tests.support.trl import ARITH, trainer_for


def test_shuffled_rewards_are_a_permutation_within_each_group_and_failures_stay_put():
    rewards = [1.0, 0.0, 0.5, None, 0.0, 0.0, 1.0, 1.0]
    seen = set()
    rng = random.Random(0)
    for _ in range(50):
        out = replaced_rewards(rewards, "shuffled", 4, rng)
        assert out[3] is None
        assert Counter(out[:4]) == Counter(rewards[:4]) and Counter(out[4:]) == Counter(rewards[4:])
        seen.add(tuple(out))
    assert len(seen) > 1  # it does shuffle


def test_constant_rewards_are_one_for_every_scored_rollout():
    assert replaced_rewards([0.0, None, 0.5], "constant", 3, random.Random(0)) == [1.0, None, 1.0]


def test_the_env_column_of_a_real_trainer_is_replaced_inside_and_restored_after(tmp_path):
    with AgentEnv.local(ARITH) as env:
        tokenizer = tiny_tokenizer(texts=["What is 2 plus 3?"], vocab_size=300)
        model = tiny_model(tokenizer, hidden_size=32, layers=1, heads=2)
        trainer = trainer_for(env, model, tokenizer, env.dataset, tmp_path, num_generations=4)
        cls = env.factory
        original = list(trainer.reward_funcs)
        # four rollouts of one prompt, played on the server: two right answers, two wrong
        instances = [cls() for _ in range(4)]
        task = env.dataset[0]
        right = next(t for t in load_bundle(ARITH).tasks if t.id == task["task_id"]).solution[0].reply
        replies = [right, "0", right, "-1"]
        for instance, reply in zip(instances, replies):
            instance.reset(**task)
            instance.end_turn(reply=reply)
        column = trainer.reward_func_names.index(cls.__name__)
        true = trainer.reward_funcs[column](environments=instances)
        with controlled_reward(trainer, {cls.__name__}, "constant"):
            assert trainer.reward_funcs[column](environments=instances) == [1.0] * 4
        assert trainer.reward_funcs == original
        env.results.clear()
        shuffled = []
        with controlled_reward(trainer, {cls.__name__}, "shuffled", seed=1):
            for _ in range(20):
                got = trainer.reward_funcs[column](environments=instances)
                assert Counter(got) == Counter(true)
                shuffled.append(tuple(got))
        assert trainer.reward_funcs == original
        assert true == [1.0, 0.0, 1.0, 0.0] and len(set(shuffled)) > 1
        for instance in instances:
            instance._close()


def test_a_control_column_that_the_trainer_lacks_is_named_in_the_error(tmp_path):
    with AgentEnv.local(ARITH) as env:
        tokenizer = tiny_tokenizer(texts=["What is 2 plus 3?"], vocab_size=300)
        trainer = trainer_for(env, tiny_model(tokenizer, hidden_size=32, layers=1, heads=2), tokenizer, env.dataset,
                              tmp_path)  # fmt: skip
        refused = pytest.raises(ValueError, match=r"no reward column named Nope \(its columns: arith\)")
        with refused, controlled_reward(trainer, {"Nope"}, "shuffled"):
            pass


def test_the_constant_control_trains_on_one_while_the_server_scores_the_episodes(tmp_path):
    config = DemoConfig.quick(steps=1, warm_start_steps=0, max_completion_length=8, max_tool_calling_iterations=1,
                              reward="constant", output_dir=tmp_path)  # fmt: skip
    report = run_demo(config, out=io.StringIO(), progress=io.StringIO())
    assert report.reward_source == "constant"
    [step] = report.steps
    assert step.trl_reward == 1.0  # what TRL trained on
    assert step.scored == step.episodes and step.reward == 0.0  # what the server scored: an untrained model
    for row in report.evals:  # evaluation is on the env's reward: the control is for training only
        assert row.trl_reward == pytest.approx(row.reward, abs=1e-6)
