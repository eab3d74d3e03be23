"""Every row of the fault table through agentenv-trl: the outcome is the table's (scored and trained on, or no reward).

The policy's part is played the way TRL plays it: ``reset(**row)``, the tool methods the model calls (TRL
itself answers a name that is not a method: "Tool ... not found"), ``end_turn``, then ``get_reward()``.
"""

from __future__ import annotations

import math

import pytest
from agentenv.faults import rule
from agentenv_trl import AgentEnv, EpisodeLost

from tests.support.fault_scenarios import SCENARIOS, scenario_server


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_each_fault_gets_the_outcome_the_fault_table_gives_it(kind: str) -> None:
    scenario = SCENARIOS[kind]
    expected = rule(kind).outcome
    with scenario_server(scenario) as server:
        env = AgentEnv(server.url, tool_timeout=5, reset_timeout=5)
        try:
            row = next(r for r in env.dataset if r["task_id"] == scenario.task)
            instance = env.environments[row.get("environment") or next(iter(env.environments))]()
            server.before_start()
            instance.reset(**row)
            server.midway()
            try:
                for tool, args in scenario.calls:
                    method = getattr(instance, tool, None)
                    if method is not None:  # else TRL answers "Tool ... not found" and the episode never sees it
                        method(**args)
                if scenario.reply is not None:
                    instance.end_turn(reply=scenario.reply)
            except EpisodeLost:
                pass  # TRL shows the model the message; the rollout's reward says the rest
            reward = instance.get_reward()
        finally:
            env.close()
    result = instance.result
    if expected == "scored":
        assert result.outcome == "scored" and reward is not None and math.isfinite(reward), result
    else:
        assert reward is None and result.outcome == "failed", result
        assert result.failure.kind == kind and result.failure.fault == str(rule(kind).fault)
