"""The warm start's conversations: the bundle's reference solutions played on the server, and their plain-text twins."""

from __future__ import annotations

from agentenv import load_bundle
from agentenv_trl import AgentEnv
from agentenv_trl.solutions import reference_conversations

from tests.support.trl import ARITH


def test_reference_solutions_call_the_calculator_answer_with_end_turn_and_score_one():
    bundle = load_bundle(ARITH)
    with AgentEnv.local(ARITH) as env:
        conversations = reference_conversations(env, bundle, "train")
        results = list(env.results)
    assert len(conversations) == len(bundle.split("train"))
    assert [r.reward for r in results] == [1.0] * len(conversations)
    messages, tools = conversations[0]
    calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
    assert calls[-1] == "end_turn" and len(calls) >= 2
    assert "end_turn" in [t.__name__ for t in tools]


def test_text_answers_call_the_calculator_then_write_the_answer_as_text_and_score_zero():
    bundle = load_bundle(ARITH)
    with AgentEnv.local(ARITH) as env:
        conversations = reference_conversations(env, bundle, "train", text_answer=True)
        results = list(env.results)
    assert len(conversations) == len(bundle.split("train"))
    assert [r.reward for r in results] == [0.0] * len(conversations)  # the turn was never answered
    for (messages, _), task in zip(conversations, bundle.split("train")):
        calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
        assert calls == [c.tool for c in task.solution[0].calls]  # the first turn's calculator calls, no end_turn
        assert messages[-1] == {"role": "assistant", "content": task.solution[0].reply}
        assert messages[-2]["role"] == "tool"  # the answer follows the calculator's
