"""Real coding-agent CLIs as a task's solver: claude-code and opencode, installed from npm at pinned versions, each
solving a shell task and a task that needs a bundle tool over MCP, two rollouts at once, through the capture proxy
to the stand-in engine."""

from __future__ import annotations

import os

import pytest
from agentenv_harness import AgentEnvSessionFactory, prompt_rows

from tests.support.harness import HARNESS, every_token_trains, solve_twice_at_once


@pytest.mark.parametrize("agent", ["claude-code", "opencode"])
def test_a_real_agent_solves_each_task_twice_at_once_and_every_captured_turn_trains(
    engine, agent_bin, monkeypatch, agent
):
    monkeypatch.setenv("PATH", f"{agent_bin}{os.pathsep}{os.environ['PATH']}")
    prompts = {r["task_id"]: r["prompt"] for r in prompt_rows(HARNESS, "train")}
    factory = AgentEnvSessionFactory(HARNESS, llm_url=engine.url, model="tiny/policy", split="train", agent=agent,
                                     deadline=300)  # fmt: skip
    try:
        for task_id in ("smoke", "multiply"):  # a shell task; a task that needs a bundle tool over MCP
            _, traces = solve_twice_at_once(factory, prompts[task_id])  # two rollouts at once
            for trace in traces:
                every_token_trains(trace)
    finally:
        factory.close()
