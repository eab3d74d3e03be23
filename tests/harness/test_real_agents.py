"""Real coding-agent CLIs as a task's solver: claude-code and opencode, installed from npm at pinned versions, each
solving a shell task and a task that needs a bundle tool over MCP, two rollouts at once, through the capture proxy
to the stand-in engine."""

from __future__ import annotations

import os

import pytest
from agentenv_harness import AgentEnvSessionFactory, prompt_rows

from tests.support.harness import HARNESS, Engine


@pytest.fixture(scope="module")
def engine():
    running = Engine(["tiny/policy"])
    yield running
    running.server.stop()


@pytest.mark.parametrize("agent", ["claude-code", "opencode"])
def test_a_real_agent_solves_each_task_twice_at_once_and_every_captured_turn_trains(
    engine, agent_bin, monkeypatch, agent
):
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    monkeypatch.setenv("PATH", f"{agent_bin}{os.pathsep}{os.environ['PATH']}")
    prompts = {r["task_id"]: r["prompt"] for r in prompt_rows(HARNESS, "train")}
    factory = AgentEnvSessionFactory(HARNESS, llm_url=engine.url, model="tiny/policy", split="train", agent=agent,
                                     deadline=300)  # fmt: skip
    try:
        for task_id in ("smoke", "multiply"):  # a shell task; a task that needs a bundle tool over MCP
            sessions = [factory.create(prompts[task_id], seed=0) for _ in range(2)]  # two rollouts at once
            codes = [s.wait_for_completion() for s in sessions]
            traces = [s.fetch_training_trace() for s in sessions]
            verdicts = [s.verify([]) for s in sessions]
            for session in sessions:
                session.close()
            assert codes == [0, 0], [v.metrics for v in verdicts]
            assert [v.env_reward for v in verdicts] == [1.0, 1.0], [v.metrics for v in verdicts]
            for trace in traces:
                turns = _turns_from_training_trace(trace)
                rows, _ = _chain_to_sequences(turns, "r", 0)
                assert len(turns) >= 2  # a tool call, then the answer
                assert sum(sum(r.completion_mask) for r in rows) == sum(len(t.output_ids) for t in turns)
                assert all(len(t.output_log_probs) == len(t.output_ids) > 0 for t in turns)
    finally:
        factory.close()
