"""The quickstart, ``agentenv demo --quick``: it trains, and its reward table is made of episodes the server played."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv.cli import main
from agentenv_trl.demo import DemoConfig
from trl_support import ARITH


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):  # the table; the bars
        code = main(["demo", "--quick", "--json", str(out / "report.json"), "--output-dir", str(out / "trl")])
    return code, json.loads((out / "report.json").read_text()), printed.getvalue()


def test_the_quick_demo_exits_cleanly(demo: Any) -> None:
    code, report, _ = demo
    assert code == 0
    assert report["bundle"] == "arith"
    assert report["warm_start_steps"] == 60 and report["warm_start_loss"] is not None


def test_the_training_steps_happened_each_on_a_batch_of_real_episodes(demo: Any) -> None:
    _, report, _ = demo
    steps = report["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert step["episodes"] == 8  # 2 prompts x 4 rollouts, each an episode get_reward scored
        assert step["scored"] + step["failed"] <= step["episodes"]
        assert step["scored"] > 0


def test_the_reward_table_agrees_with_what_trl_logged(demo: Any) -> None:
    _, report, _ = demo
    for row in report["steps"] + report["evals"]:
        if row["trl_reward"] is None:  # TRL logs None when no rollout of the batch was scored
            assert row["env_reward"] is None
        else:
            assert row["env_reward"] == pytest.approx(row["trl_reward"], abs=1e-6)


def test_the_eval_reward_was_measured_before_and_after_on_the_eval_split(demo: Any) -> None:
    _, report, _ = demo
    assert [e["when"] for e in report["evals"]] == ["before GRPO", "after GRPO"]
    for row in report["evals"]:
        assert row["episodes"] == len(load_bundle(ARITH).split("eval")) * DemoConfig.quick().eval_generations
        assert row["env_reward"] is not None


def test_every_reported_episode_was_played_on_the_server(demo: Any) -> None:
    _, report, _ = demo
    reported = sum(s["episodes"] for s in report["steps"]) + sum(e["episodes"] for e in report["evals"])
    references = len(load_bundle(ARITH).split("train"))  # the warm start's reference plays, one per train task
    assert report["episodes_on_server"] >= reported + references


def test_the_demo_prints_a_reward_table(demo: Any) -> None:
    _, report, printed = demo
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "episodes"])
    for offset, step in enumerate(report["steps"], start=2):
        assert lines[header + offset].split()[:2] == [str(step["step"]), str(step["episodes"])]
    assert any(line.startswith("before GRPO") for line in lines)
    assert any(line.startswith("after GRPO") for line in lines)
