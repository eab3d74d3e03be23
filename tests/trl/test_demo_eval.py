"""The demo's evaluation: however large the eval split, it holds no more sessions than the server allows."""

from __future__ import annotations

import io

import pytest
from agentenv import load_bundle
from agentenv_trl.demo import DemoConfig, eval_batch_size, run_demo

from tests.support.trl import ARITH


@pytest.mark.parametrize(
    ("rows", "changes", "expected"),
    [
        (32, {}, 32),  # 64 rollouts: two full batches of 32
        (30, {}, 30),  # 60 rollouts: the largest even divisor up to 32
        (3, {}, 6),  # a small split: one batch
        (32, {"max_concurrent_envs": 8}, 8),  # never more rollouts at once than the server has sessions
        (32, {"max_concurrent_envs": 9}, 8),
        (5, {"eval_generations": 4, "eval_batch_size": 16}, 4),  # 20 rollouts: batches of 4 divide them, 8 does not
        (0, {}, 2),
    ],
)
def test_the_eval_batch_divides_the_rollouts_and_fits_the_server(rows, changes, expected):
    assert eval_batch_size(DemoConfig(**{"eval_generations": 2, **changes}), rows) == expected


def test_an_eval_split_with_more_rollouts_than_the_server_has_sessions_is_evaluated_in_full(tmp_path):
    # an untrained model and short completions: what is under test is how many sessions evaluation holds
    config = DemoConfig.quick(
        steps=1,
        warm_start_steps=0,
        max_completion_length=8,
        max_tool_calling_iterations=1,
        max_concurrent_envs=8,
        output_dir=tmp_path,
    )
    tasks = len(load_bundle(ARITH).split("eval"))
    assert tasks * config.eval_generations > config.max_concurrent_envs
    report = run_demo(config, out=io.StringIO())
    assert [e.when for e in report.evals] == ["before GRPO", "after GRPO"]
    for row in report.evals:
        assert row.episodes == tasks * config.eval_generations  # every eval task, twice, in batches of 8
        assert row.scored + row.failed == row.episodes and row.failed == 0
        assert row.reward == pytest.approx(row.trl_reward, abs=1e-6)
    assert [s.episodes for s in report.steps] == [config.prompts_per_step * config.num_generations]
