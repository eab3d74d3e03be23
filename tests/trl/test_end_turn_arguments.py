"""``end_turn`` answers arguments that do not fit its schema as every tool does: with the error as text, the turn left
open, never an exception TRL counts as a tool failure (TRL's own GRPOTrainer on a tiny model fitted to a script)."""

from __future__ import annotations

from typing import Any

import pytest
from agentenv_trl import AgentEnv
from datasets import Dataset

from tests.support.trl import FAKE, logged, script, tool_calls, warm_and_train

# the model adds an argument end_turn does not take, reads the answer, then ends both turns as it should
SCRIPT = [
    [("end_turn", {"reply": "hello", "mood": "happy"}), ("end_turn", {"reply": "hello"})],
    [("end_turn", {"reply": "goodbye"})],
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with AgentEnv.local(FAKE) as env:
        row = next(r for r in env.dataset if r["task_id"] == "two-turn")
        conversation = script(env, row, SCRIPT)
        env.results.clear()
        trainer, steps = warm_and_train(
            env,
            [conversation],
            Dataset.from_list([row, row]),
            tmp_path_factory.mktemp("end-turn"),
            warm_steps=200,
            batch_size=4,
            per_device_train_batch_size=2,
            max_steps=1,
            max_completion_length=160,
        )
        yield conversation, trainer, steps


def test_the_script_is_answered_with_the_schema_error_as_text(run: Any) -> None:
    conversation, _, _ = run
    answers = [m["content"] for m in conversation[0] if m.get("role") == "tool"]
    assert answers[0] == (
        "invalid arguments for tool 'end_turn': $: Additional properties are not allowed ('mood' was unexpected)"
    )
    assert answers[1:] == ["Now say goodbye.", "The episode is over."]  # the turn stayed open for the real answer


def test_trl_counts_no_tool_failure_and_the_episode_scores(run: Any) -> None:
    _, trainer, steps = run
    calls = [call for step in steps for c in step["completions"] for call in tool_calls(c)]
    assert ("end_turn", {"reply": "hello", "mood": "happy"}) in calls, calls  # the model did add the argument
    assert logged(trainer, "tools/failure_frequency") == [0.0]
    answers = [m["content"] for step in steps for c in step["completions"] for m in c if m.get("role") == "tool"]
    assert any("'mood' was unexpected" in a for a in answers), answers
    assert [r.reward for step in steps for r in step["episodes"]] == [1.0, 1.0]
