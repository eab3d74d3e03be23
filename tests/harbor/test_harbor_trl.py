"""TRL's own GRPOTrainer trains on Harbor tasks: two steps on the CPU, a tiny model built here, each rollout an
episode in a task's container, scored by the task's tests.

harbor needs Python >= 3.12 and this project's CPU torch wheel is for 3.11, so the two run apart, as a trainer and
a server on two machines would: ``agentenv serve`` of the suite on the interpreter in ``$AGENTENV_HARBOR_PYTHON``
(the harbor session's), TRL on this one, over the wire. ``nox -s harbor`` runs this module so; on an interpreter
without torch it is skipped.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from tests.harbor.support import SUITE
from tests.support import ServeProcess
from tests.support.containers import wait_until_none

pytest.importorskip("torch", reason="TRL trains on the Python the CPU torch wheel is for (nox -s harbor runs it)")
PYTHON = os.environ.get("AGENTENV_HARBOR_PYTHON")
pytestmark = pytest.mark.skipif(PYTHON is None, reason="$AGENTENV_HARBOR_PYTHON names no interpreter with harbor")

# what the warm start teaches, a task each: the work done through the bash tool, then the end of the turn
_WORK = {
    "fix-config": "sed -i -e 's/^debug = true$/debug = false/' -e 's/^port = 8080$/port = 9090/' service.ini",
    "sum-numbers": "mkdir -p out && awk '{s+=$1} END {print s}' numbers.txt > out/sum.txt && "
    "sort -n numbers.txt | tail -n 1 > out/max.txt",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two GRPO steps of 2 prompts x 2 rollouts on the suite, served by a harbor-capable ``agentenv serve``."""
    from agentenv_trl import AgentEnv

    from tests.support.trl import script, warm_and_train

    server = ServeProcess(SUITE)
    server.args[0] = str(PYTHON)  # the server's interpreter is the one with harbor
    server.start(timeout=180)
    try:
        env = AgentEnv(server.url, tool_timeout=120)
        rows = {r["task_id"]: r for r in env.dataset}
        conversations = [script(env, rows[task], [[("bash", {"command": command})]]) for task, command in _WORK.items()]
        scripted = list(env.results)
        env.results.clear()
        trainer, steps = warm_and_train(
            env,
            conversations,
            env.dataset,
            tmp_path_factory.mktemp("harbor"),
            warm_steps=150,
            batch_size=4,
            max_completion_length=160,
        )
    finally:
        server.terminate()
    yield trainer, steps, scripted, wait_until_none(server.proc.pid)


def test_the_scripted_work_scores_1_through_the_server(run: Any) -> None:
    _, _, scripted, _ = run
    assert [(r.task_id, r.outcome, r.reward) for r in scripted] == [
        ("fix-config", "scored", 1.0),
        ("sum-numbers", "scored", 1.0),
    ]


def test_two_grpo_steps_ran_on_harbor_episodes_scored_by_their_tests(run: Any) -> None:
    trainer, steps, _, _ = run
    assert trainer.state.global_step == 2
    assert [len(s["episodes"]) for s in steps] == [4, 4]  # 2 prompts x 2 rollouts, each a real episode
    assert all(r.outcome == "scored" and r.reward in (0.0, 1.0) for s in steps for r in s["episodes"])
    assert any(r.reward == 1.0 for s in steps for r in s["episodes"])  # the warm start does the work


def test_the_rewards_trl_trains_on_are_the_tests_rewards(run: Any) -> None:
    from tests.support.trl import is_nan, logged

    trainer, steps, _, _ = run
    for step, logged_mean in zip(steps, logged(trainer, "reward"), strict=True):
        from_env = [r.reward for r in step["episodes"]]
        from_trl = [v for column in step["rewards"].values() for v in column if not is_nan(v) and v is not None]
        assert sorted(from_trl) == pytest.approx(sorted(from_env))
        assert logged_mean == pytest.approx(statistics.fmean(from_env))


def test_no_container_is_left_after_training(run: Any) -> None:
    assert run[3] == {}
