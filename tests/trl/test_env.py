"""AgentEnv and its environment classes, driven the way TRL drives them: reset(**row), tools, get_reward()."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from agentenv.errors import ServerUnavailable, UnknownSplit
from agentenv_trl import AgentEnv, EpisodeLost

from tests.support.trl import FAKE, INBOX


def row_of(env: AgentEnv, task_id: str, split: str = "train") -> dict[str, Any]:
    return next(r for r in env.dataset_for(split) if r["task_id"] == task_id)


def instance_for(env: AgentEnv, row: dict[str, Any]) -> Any:
    classes = env.environments
    return classes[row.get("environment") or next(iter(classes))]()


@pytest.fixture(scope="module")
def fake_env() -> Any:
    with AgentEnv.local(FAKE, tool_timeout=1.0, reset_timeout=1.0) as env:
        yield env


def test_dataset_has_a_row_per_task_of_the_split_with_its_prompt_as_chat_messages() -> None:
    with AgentEnv.local(INBOX) as env:
        rows = list(env.dataset)
    assert [r["index"] for r in rows] == list(range(6))
    assert {r["split"] for r in rows} == {"train"}
    first = rows[0]
    assert first["task_id"] == "q-001"
    assert first["prompt"] == [
        {
            "role": "system",
            "content": "You answer questions about the user's inbox. Use the tools to look things up, "
            "then answer briefly.",
        },
        {"role": "user", "content": "Who sent the message about the budget?"},
    ]
    assert "environment" not in first  # one toolset: the factory is a class, no routing column


def test_dataset_for_reads_another_split() -> None:
    with AgentEnv.local(INBOX) as env:
        assert {r["split"] for r in env.dataset_for("eval")} == {"eval"}
        assert len(env.dataset_for("eval")) == 2


def test_one_toolset_gives_one_class_named_after_the_bundle() -> None:
    with AgentEnv.local(INBOX) as env:
        assert isinstance(env.factory, type)
        assert env.factory.__name__ == "inbox"


def test_several_toolsets_give_a_dict_of_classes_and_an_environment_column(fake_env: AgentEnv) -> None:
    factory = fake_env.factory
    assert isinstance(factory, dict)
    assert {"ok", "ok-without-add", "deploy_fails"} <= set(factory)
    rows = {r["task_id"]: r["environment"] for r in fake_env.dataset}
    assert rows["echo"] == rows["two-turn"] == "ok"
    assert rows["no-add"] == "ok-without-add"
    assert not hasattr(factory["ok-without-add"], "add") and hasattr(factory["ok"], "add")


def test_an_unknown_split_fails_early_naming_the_splits_and_the_fix() -> None:
    with pytest.raises(UnknownSplit) as error:  # a local server's token is this process's own: local() asks
        AgentEnv.local(INBOX, split="dev")
    assert "no split 'dev'" in str(error.value) and "train, eval" in str(error.value)
    assert "split=" in str(error.value)


def test_no_server_at_the_url_fails_early_naming_the_fix() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerUnavailable) as error:
        AgentEnv(f"http://127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in str(error.value)
    assert "agentenv serve" in str(error.value) and "AgentEnv.local" in str(error.value)


def test_reset_returns_before_the_deploy_ends(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "deploy-hangs")  # this env's deploy never ends
    env = instance_for(fake_env, row)
    assert env.reset(**row) is None
    assert env.get_reward() is None  # the deploy missed its deadline: not trained on
    assert env.result.outcome == "failed"
    assert (env.result.failure.kind, env.result.failure.stage) == ("deadline", "deploy")


def test_end_turn_hands_over_the_next_prompt_then_says_the_episode_is_over(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "two-turn")
    env = instance_for(fake_env, row)
    env.reset(**row)
    assert env.end_turn(reply="hello") == "Now say goodbye."
    assert env.end_turn(reply="goodbye") == "The episode is over."
    assert env.get_reward() == 1.0
    assert env.result.scores == {"answer-1": 1.0, "answer-2": 1.0}


def test_get_reward_ends_the_turns_the_model_left_open_with_an_empty_reply(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "two-turn")
    env = instance_for(fake_env, row)
    env.reset(**row)
    assert env.end_turn(reply="hello") == "Now say goodbye."
    assert env.get_reward() == 0.5  # turn 2 ended with "" and scored 0: the policy's doing, trained on
    assert env.result.outcome == "scored" and env.result.scores == {"answer-1": 1.0, "answer-2": 0.0}


def test_a_tool_answers_with_the_servers_text(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "echo")
    env = instance_for(fake_env, row)
    env.reset(**row)
    assert env.echo(text="ping") == "ping"
    assert env.fail().startswith("error: ")  # the policy's mistake comes back as text and is scored
    assert env.end_turn(reply="ping") == "The episode is over."
    assert env.get_reward() == 1.0


def test_a_tool_past_its_deadline_loses_the_episode_and_get_reward_is_none(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "echo")
    env = instance_for(fake_env, row)
    env.reset(**row)
    with pytest.raises(EpisodeLost, match="deadline"):
        env.hang(seconds=30)
    with pytest.raises(EpisodeLost):
        env.echo(text="after")  # the episode is over for the model too
    assert env.get_reward() is None
    assert (env.result.failure.kind, env.result.failure.stage) == ("deadline", "tool")


def test_a_failed_deploy_loses_the_episode_and_get_reward_is_none(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "deploy-fails")
    env = instance_for(fake_env, row)
    env.reset(**row)
    with pytest.raises(EpisodeLost, match="deploy during deploy"):
        env.echo(text="x")
    assert env.get_reward() is None
    assert env.result.outcome == "failed" and "failed on purpose" in env.result.failure.message


def test_an_episode_without_a_verdict_gets_no_reward(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "no-verdict")
    env = instance_for(fake_env, row)
    env.reset(**row)
    env.end_turn(reply="anything")
    assert env.get_reward() is None
    assert env.result.outcome == "unscored"


def test_a_row_whose_prompt_is_not_its_tasks_gets_no_reward(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "echo")
    row["prompt"] = [{"role": "user", "content": "Something the task never asked."}]
    env = instance_for(fake_env, row)
    env.reset(**row)
    env.echo(text="ping")
    env.end_turn(reply="ping")
    assert env.get_reward() is None  # it would have scored 1.0, but not for the prompt the model saw
    assert env.result.outcome == "unscored" and "Rebuild the dataset" in env.result.reason


def test_a_row_routed_to_another_toolsets_class_gets_no_reward(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "no-add")
    env = fake_env.environments["ok"]()  # offers add, which this task denies
    env.reset(**row)
    assert env.get_reward() is None
    assert "toolset" in env.result.reason


def test_a_row_without_task_id_is_refused_naming_the_fix(fake_env: AgentEnv) -> None:
    env = fake_env.environments["ok"]()
    with pytest.raises(Exception, match=r"train_dataset=env\.dataset"):
        env.reset(prompt=[{"role": "user", "content": "hi"}])


def test_an_instance_plays_episode_after_episode_on_one_session(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "echo")
    env = instance_for(fake_env, row)
    rewards = []
    for reply in ("ping", "nope", "ping"):
        env.reset(**row)
        env.echo(text="ping")
        env.end_turn(reply=reply)
        rewards.append(env.get_reward())
    assert rewards == [1.0, 0.0, 1.0]
    assert env.episodes == 3
    assert env in fake_env.instances


def test_results_record_what_each_get_reward_returned(fake_env: AgentEnv) -> None:
    fake_env.results.clear()
    row = row_of(fake_env, "two-turn")
    env = instance_for(fake_env, row)
    env.reset(**row)
    reward = env.get_reward()
    assert [(r.task_id, r.reward) for r in fake_env.results] == [("two-turn", reward)]


def test_a_closed_agentenv_refuses_new_episodes() -> None:
    env = AgentEnv.local(FAKE)
    cls = env.environments["ok"]
    instance = cls()
    env.close()
    with pytest.raises(Exception, match="was closed"):
        instance.reset(task_id="echo", prompt=[{"role": "user", "content": "x"}])


def test_a_tool_called_after_the_last_turn_answers_that_the_episode_is_over(fake_env: AgentEnv) -> None:
    row = row_of(fake_env, "echo")
    env = instance_for(fake_env, row)
    env.reset(**row)
    env.echo(text="ping")
    assert env.end_turn(reply="ping") == "The episode is over."
    assert env.echo(text="again") == "error: the episode is over; echo was not called"
    assert env.end_turn(reply="again") == "The episode is over."
    assert env.get_reward() == 1.0
