"""Every row of the fault table through agentenv-verl's AgentEnvAgentLoop: the outcome is the table's.

The policy's part is the model's replies (a tool call per call, then the reply; a turn left open is the
assistant-turn cap cutting the rollout after its last call). One attempt, so a failed rollout raises
``RolloutFailed`` rather than being replayed (the replays have their own tests).
"""

from __future__ import annotations

import asyncio
import math

import pytest
from agentenv.faults import rule
from agentenv_verl import RolloutFailed

from tests.support.fault_scenarios import SCENARIOS, scenario_server
from tests.support.verl import ScriptedServer, make_loop, tool_call, verl_config


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
async def test_each_fault_gets_the_outcome_the_fault_table_gives_it(kind, tokenizer, fake_rows):
    scenario = SCENARIOS[kind]
    expected = rule(kind).outcome
    replies = [tool_call(tool, **args) for tool, args in scenario.calls]
    if scenario.reply is not None:
        replies.append(f"{scenario.reply}<|im_end|>")
    cap = {"max_assistant_turns": len(replies)} if scenario.reply is None else {}
    with scenario_server(scenario) as server:

        async def midway(n: int) -> None:
            if n == 1:  # the episode started; the model is about to answer for the first time
                await asyncio.get_running_loop().run_in_executor(None, server.midway)

        model = ScriptedServer(tokenizer, replies, before=midway)
        loop = make_loop(tokenizer, model, server.url, config=verl_config(**cap), attempts=1, tool_timeout=5,
                         reset_timeout=5)  # fmt: skip
        await asyncio.get_running_loop().run_in_executor(None, server.before_start)
        if expected == "scored":
            out = await loop.run({"temperature": 1.0}, **fake_rows[scenario.task])
            assert math.isfinite(out.reward_score)
            assert out.extra_fields["reward_extra_info"]["attempts"] == 1
        else:
            with pytest.raises(RolloutFailed) as failed:
                await loop.run({"temperature": 1.0}, **fake_rows[scenario.task])
            assert failed.value.failure.kind == kind and failed.value.failure.fault == str(rule(kind).fault)
