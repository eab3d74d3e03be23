"""Episodes on the fake bundle's real envs: scored, failed and unscored, the policy's mistakes, teardown."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from agentenv import Episode, load_bundle

from tests.support import ARITH, until
from tests.support.bundles import copy_bundle, patch, play

WHERE_ENV = '''
import asyncio
import threading

from agentenv import Env, Tool, tool

NONE = {"type": "object", "properties": {}, "additionalProperties": False}
SIGNAL = threading.Event()


class Where(Env):
    """Tools that say which thread they ran on, and a pair that needs the loop free while one blocks."""

    @tool(NONE)
    def wait_for_signal(self) -> str:
        return "signalled" if SIGNAL.wait(10) else "no signal within 10 s"

    @tool(NONE)
    async def send_signal(self) -> str:
        SIGNAL.set()
        return "sent"

    @tool(NONE)
    async def on_loop(self) -> int:
        asyncio.get_running_loop()  # raises outside a running loop
        return threading.get_ident()

    @tool(NONE)
    def blocking(self) -> int:
        return threading.get_ident()


class OwnCall(Env):
    """An env that lists its tools and answers calls itself (no @tool methods)."""

    def tools(self):
        return [Tool("ident", "The thread's id.", NONE)]

    def call(self, name, args):
        return threading.get_ident()


class OwnAsyncCall(OwnCall):
    async def call(self, name, args):
        asyncio.get_running_loop()
        return threading.get_ident()
'''


@pytest.fixture
def where(tmp_path: Path):
    bundle_dir = copy_bundle(tmp_path)
    (bundle_dir / "where_env.py").write_text(WHERE_ENV, encoding="utf-8")
    patch(
        bundle_dir / "bundle.yaml",
        "envs:\n",
        "envs:\n  where: {kind: python, target: 'where_env:Where'}\n"
        "  own: {kind: python, target: 'where_env:OwnCall'}\n"
        "  own_async: {kind: python, target: 'where_env:OwnAsyncCall'}\n",
    )
    for env in ("where", "own", "own_async"):
        (bundle_dir / "tasks" / f"{env}.yaml").write_text(
            f"id: {env}\nsplit: train\ntoolset: {{envs: [{env}]}}\n"
            "turns: [{prompt: Which thread, verifiers: [{id: answer-1, kind: contains, answer: x}]}]\n",
            encoding="utf-8",
        )
    return load_bundle(bundle_dir)


# --- scored ----------------------------------------------------------------------------------


async def test_a_played_task_is_scored_with_its_reward_scores_and_turns(fake_bundle):
    _, steps, result = await play(fake_bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert steps[0].text == "ping"
    assert (steps[0].error, steps[0].done) == (False, False)
    assert steps[1].done and steps[1].result == result
    assert (result.outcome, result.reward, result.scores, result.turns) == ("scored", 1.0, {"answer-1": 1.0}, 1)
    assert result.failure is None


async def test_a_wrong_answer_is_scored_zero(fake_bundle):
    _, _, result = await play(fake_bundle, "echo", [("echo", {"text": "ping"})], ["pong"])
    assert (result.outcome, result.reward) == ("scored", 0.0)


async def test_ending_a_turn_answers_the_next_prompt(fake_bundle):
    episode = Episode(fake_bundle, fake_bundle.task("two-turn"))
    await episode.start()
    step = await episode.end_turn("hello")
    assert (step.text, step.done) == ("Now say goodbye.", False)
    assert episode.prompt == "Now say goodbye."
    await episode.close()


@pytest.mark.parametrize(
    ("rule", "replies", "reward"),
    [
        ("mean", ("hello", "nope"), 0.5),
        ("min", ("hello", "nope"), 0.0),
        ("min", ("hello", "goodbye"), 1.0),
        ("last", ("hello", "nope"), 0.0),
        ("last", ("nope", "goodbye"), 1.0),
    ],
)
async def test_the_reward_rule_written_in_the_task_combines_the_turn_scores(tmp_path, rule, replies, reward):
    bundle_dir = copy_bundle(tmp_path)
    with open(bundle_dir / "tasks" / "two-turn.yaml", "a", encoding="utf-8") as f:
        f.write(f"reward: {rule}\n")
    _, _, result = await play(load_bundle(bundle_dir), "two-turn", replies=replies)
    assert (result.outcome, result.reward) == ("scored", reward)


@pytest.mark.parametrize(("replies", "reward"), [(("yes", "x"), 0.25), (("x", "no"), 0.75), (("yes", "no"), 1.0)])
async def test_the_weighted_rule_weighs_each_step(fake_bundle, replies, reward):
    _, _, result = await play(fake_bundle, "weighted", replies=replies)
    assert (result.outcome, result.reward) == ("scored", reward)


async def test_the_mean_is_the_default_rule(fake_bundle):
    assert fake_bundle.task("two-turn").reward.rule == "mean"
    _, _, result = await play(fake_bundle, "two-turn", replies=("hello", "nope"))
    assert result.reward == 0.5
    assert result.scores == {"answer-1": 1.0, "answer-2": 0.0}


async def test_a_reward_given_to_the_episode_overrides_the_tasks_rule(fake_bundle):
    _, _, by_name = await play(fake_bundle, "weighted", replies=("yes", "x"), reward="min")
    _, _, by_callable = await play(fake_bundle, "weighted", replies=("yes", "x"), reward=lambda scores: 0.125)
    assert (by_name.reward, by_callable.reward) == (0.0, 0.125)


async def test_an_episode_records_the_seconds_spent_deploying_in_tools_and_scoring(fake_bundle):
    episode = Episode(fake_bundle, fake_bundle.task("slow-deploy"))
    await episode.start()
    assert not episode.deployed  # start() returns at once; the deploy runs in the background
    step = await episode.call("echo", {"text": "slow"})
    assert step.text == "slow"
    assert episode.deployed
    await episode.end_turn("slow")
    result = await episode.close()
    assert result.reward == 1.0
    assert result.seconds.deploy >= 0.4  # the slow env sleeps 0.4 s in its deploy
    assert result.seconds.tools > 0 and result.seconds.scoring > 0
    assert result.seconds.total == pytest.approx(result.seconds.deploy + result.seconds.tools + result.seconds.scoring)


# --- failed: the env's fault, reward None ----------------------------------------------------


async def test_a_failed_deploy_fails_the_episode_with_reward_none(fake_bundle, ledger):
    _, steps, result = await play(fake_bundle, "deploy-fails", [("echo", {"text": "x"})], ["x"])
    assert steps[0].done and steps[0].result == result
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("deploy", "deploy")
    assert "the fake deploy failed on purpose" in result.failure.message
    assert (ledger.count("deploy"), ledger.count("teardown")) == (1, 1)


async def test_a_deploy_past_its_deadline_fails_the_episode(fake_bundle, ledger):
    _, _, result = await play(fake_bundle, "deploy-hangs", [("echo", {"text": "x"})], deploy_timeout=0.3)
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("deadline", "deploy")
    assert "deploy took longer than its deadline (0.3 s)" in result.failure.message
    assert ledger.count("teardown") == 1


async def test_an_async_tool_past_its_deadline_fails_the_episode(fake_bundle, ledger):
    _, steps, result = await play(fake_bundle, "echo", [("hang", {})], ["x"], tool_timeout=0.3)
    assert steps[0].done
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("deadline", "tool")
    assert "tool 'hang' did not answer within its deadline (0.3 s)" in result.failure.message
    assert ledger.count("teardown") == 1


async def test_a_blocking_tool_past_its_deadline_fails_the_episode(fake_bundle):
    _, _, result = await play(fake_bundle, "echo", [("sleep_sync", {"seconds": 1.0})], tool_timeout=0.3)
    assert (result.outcome, result.failure.kind, result.failure.stage) == ("failed", "deadline", "tool")


async def test_an_env_crash_fails_the_episode_and_tears_down_once(fake_bundle, ledger):
    episode, steps, result = await play(fake_bundle, "echo", [("echo", {"text": "a"}), ("crash", {})], ["a"])
    assert steps[1].done
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("crash", "tool")
    assert "the fake env crashed on purpose" in result.failure.message
    await episode.close()
    assert (ledger.count("deploy"), ledger.count("teardown")) == (1, 1)


async def test_a_broken_verifier_fails_the_episode_naming_the_step(fake_bundle):
    _, _, result = await play(fake_bundle, "broken-verifier", replies=["anything"])
    assert (result.outcome, result.reward) == ("failed", None)
    assert (result.failure.kind, result.failure.stage) == ("verifier", "scoring")
    assert (
        result.failure.message
        == "verifier 'answer-1' (python check fake_env:broken_check): RuntimeError: the fake verifier broke "
        "(fake_env.py:239 in broken_check)"
    )


async def test_a_failed_episode_answers_every_later_call_with_its_result(fake_bundle):
    episode = Episode(fake_bundle, fake_bundle.task("echo"))
    await episode.start()
    failed = await episode.call("crash", {})
    later = [await episode.call("echo", {"text": "x"}), await episode.end_turn("x")]
    assert all(step.done and step.result == failed.result for step in later)
    assert (await episode.close()) == failed.result


# --- unscored --------------------------------------------------------------------------------


async def test_a_verifier_without_a_verdict_leaves_the_episode_unscored(fake_bundle):
    _, _, result = await play(fake_bundle, "no-verdict", replies=["anything"])
    assert (result.outcome, result.reward, result.failure) == ("unscored", None, None)
    assert result.scores == {"answer-1": None}
    assert result.reason == "no verdict from answer-1"


async def test_an_episode_closed_before_its_last_turn_is_unscored(fake_bundle, ledger):
    _, _, result = await play(fake_bundle, "two-turn", replies=["hello"])
    assert (result.outcome, result.reward) == ("unscored", None)
    assert result.reason == "ended before its last turn (turn 2 of 2)"
    assert result.scores == {"answer-1": 1.0}
    assert ledger.count("teardown") == 1


# --- the policy's mistakes: answered as errors, the episode goes on and is scored --------------


async def test_an_unknown_tool_is_answered_with_the_tools_and_the_episode_goes_on(fake_bundle):
    _, steps, result = await play(
        fake_bundle, "no-add", [("add", {"a": 1, "b": 2}), ("echo", {"text": "pong"})], ["pong"]
    )
    assert steps[0].error and not steps[0].done
    assert steps[0].text.startswith("unknown tool 'add'; the tools are: echo, noop, noop_sync, nested")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_tool_error_is_answered_as_an_error_and_the_episode_goes_on(fake_bundle):
    _, steps, result = await play(fake_bundle, "echo", [("fail", {}), ("echo", {"text": "ping"})], ["ping"])
    assert (steps[0].text, steps[0].error, steps[0].done) == ("error: this tool always refuses", True, False)
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_calculator_refusing_to_divide_by_zero_is_scored(tmp_path):
    bundle = load_bundle(ARITH)
    task = bundle.split("train")[0]
    _, steps, result = await play(bundle, task.id, [("divide", {"a": 1, "b": 0})], ["no idea"])
    assert (steps[0].text, steps[0].error) == ("error: cannot divide by zero", True)
    assert (result.outcome, result.reward) == ("scored", 0.0)


VALID_FILTER = {"sender": "dana"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "$: 'filter' is a required property"),
        ({"filter": {}}, "$.filter: 'sender' is a required property"),
        ({"filter": {"sender": 7}}, "$.filter.sender: 7 is not of type 'string'"),
        ({"filter": {"sender": "a", "after": -1}}, "$.filter.after: -1 is less than the minimum of 0"),
        (
            {"filter": {"sender": "a", "cc": "b"}},
            "$.filter: Additional properties are not allowed ('cc' was unexpected)",
        ),
        (
            {"filter": {"sender": "a", "tags": ["work", "play"]}},
            "$.filter.tags[1]: 'play' is not one of ['work', 'home']",
        ),
        ({"filter": VALID_FILTER, "order": "up"}, "$.order: 'up' is not one of ['asc', 'desc']"),
        ({"filter": VALID_FILTER, "labels": ["a", 2]}, "$.labels[1]: 2 is not of type 'string'"),
        ({"filter": VALID_FILTER, "labels": "a"}, "$.labels: 'a' is not of type 'array'"),
        ({"filter": VALID_FILTER, "limit": 11}, "$.limit: 11 is greater than the maximum of 10"),
        ({"filter": VALID_FILTER, "note": 5}, "$.note: 5 is not of type 'string', 'null'"),
        ({"filter": VALID_FILTER, "score": True}, "$.score: True is not valid under any of the given schemas"),
        ({"filter": VALID_FILTER, "score": 1.5}, "$.score: 1.5 is not valid under any of the given schemas"),
        (
            {"filter": VALID_FILTER, "verbose": True},
            "$: Additional properties are not allowed ('verbose' was unexpected)",
        ),
        (["dana"], "arguments for tool 'nested' must be a JSON object, got list"),
    ],
    ids=[
        "required",
        "nested-required",
        "nested-type",
        "nested-minimum",
        "nested-additional",
        "array-item-enum",
        "enum",
        "array-item-type",
        "array-type",
        "maximum",
        "nullable-type",
        "union-bool",
        "union-float",
        "additional",
        "not-an-object",
    ],
)
async def test_invalid_arguments_are_answered_with_the_schema_error_and_the_episode_goes_on(fake_bundle, args, message):
    episode, steps, result = await play(
        fake_bundle, "echo", [("nested", args), ("echo", {"text": "ping"})], ["ping"], tool_timeout=5
    )
    assert steps[0].error and not steps[0].done
    assert message in steps[0].text
    assert steps[0].text.startswith(("invalid arguments for tool 'nested': ", "arguments for tool 'nested'"))
    assert episode.calls[0].error and episode.calls[0].tool == "nested"
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_several_invalid_arguments_are_all_named_in_one_answer(fake_bundle):
    _, steps, _ = await play(fake_bundle, "echo", [("nested", {"filter": {"sender": 1, "after": -1}, "order": "up"})])
    assert steps[0].text.count("; ") == 2
    for path in ("$.filter.after", "$.filter.sender", "$.order"):
        assert path in steps[0].text


@pytest.mark.parametrize(
    "args",
    [
        {"filter": {"sender": "dana"}},
        {"filter": {"sender": "dana", "after": 0, "tags": ["home"]}, "order": "desc", "limit": 10},
        {"filter": {"sender": "dana"}, "note": None, "score": "high", "labels": []},
        {"filter": {"sender": "dana"}, "note": "n", "score": 3, "labels": ["a", "b"]},
    ],
    ids=["only-required", "enums-and-bounds", "null-and-union-string", "union-integer"],
)
async def test_valid_nested_arguments_reach_the_tool(fake_bundle, args):
    import json

    _, steps, _ = await play(fake_bundle, "echo", [("nested", args)])
    assert not steps[0].error
    echoed = json.loads(steps[0].text)
    assert {k: v for k, v in echoed.items() if k in args} == args


# --- where tools run ---------------------------------------------------------------------------


async def test_an_async_tool_runs_on_the_event_loop(where):
    _, steps, _ = await play(where, "where", [("on_loop", {})])
    assert not steps[0].error, steps[0].text
    assert steps[0].text == str(threading.get_ident())


async def test_a_sync_tool_runs_in_another_thread(where):
    _, steps, _ = await play(where, "where", [("blocking", {})])
    assert not steps[0].error, steps[0].text
    assert steps[0].text != str(threading.get_ident())


async def test_an_envs_own_sync_call_runs_in_another_thread(where):
    _, steps, _ = await play(where, "own", [("ident", {})])
    assert not steps[0].error, steps[0].text
    assert steps[0].text != str(threading.get_ident())


async def test_an_envs_own_async_call_runs_on_the_event_loop(where):
    _, steps, _ = await play(where, "own_async", [("ident", {})])
    assert steps[0].text == str(threading.get_ident())


async def test_a_blocking_tool_leaves_the_loop_free_for_other_episodes(where):
    first = Episode(where, where.task("where"))
    second = Episode(where, where.task("where"))
    await first.start()
    await second.start()
    blocked = asyncio.create_task(first.call("wait_for_signal", {}))
    assert (await second.call("send_signal", {})).text == "sent"  # runs while the first call blocks its thread
    assert (await blocked).text == "signalled"
    await first.close()
    await second.close()


# --- teardown exactly once ---------------------------------------------------------------------


async def test_teardown_runs_once_when_the_task_blocked_in_a_tool_call_is_cancelled(fake_bundle, ledger):
    episode = Episode(fake_bundle, fake_bundle.task("echo"))
    await episode.start()
    await episode.call("echo", {"text": "a"})
    call = asyncio.create_task(episode.call("hang", {}))
    done, _ = await asyncio.wait([call], timeout=0.2)
    assert not done  # blocked in the hanging tool
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    result = await episode.close()
    await episode.close()
    assert (result.outcome, result.reward) == ("unscored", None)
    assert (ledger.count("deploy"), ledger.count("teardown")) == (1, 1)


async def test_a_cancelled_close_still_tears_down_once_and_a_later_close_returns_the_result(fake_bundle, ledger):
    episode = Episode(fake_bundle, fake_bundle.task("echo"))
    await episode.start()
    await episode.call("echo", {"text": "a"})
    closing = asyncio.create_task(episode.close())
    await asyncio.sleep(0)  # close() is now waiting on the (threaded) teardown
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    result = await episode.close()
    assert (result.outcome, result.reason) == ("unscored", "ended before its last turn (turn 1 of 1)")
    assert episode.closed
    assert ledger.count("teardown") == 1


async def test_closing_during_the_deploy_cancels_it_and_tears_down_once(fake_bundle, ledger):
    episode = Episode(fake_bundle, fake_bundle.task("deploy-hangs"))
    await episode.start()
    await until(lambda: ledger.count("deploy") == 1)  # the deploy started (and hangs)
    result = await episode.close()
    assert result.outcome == "unscored"
    assert (ledger.count("deploy"), ledger.count("teardown")) == (1, 1)


async def test_cancelling_a_call_waiting_for_the_deploy_then_closing_tears_down_once(fake_bundle, ledger):
    episode = Episode(fake_bundle, fake_bundle.task("deploy-hangs"))
    await episode.start()
    waiting = asyncio.create_task(episode.call("echo", {"text": "x"}))
    done, _ = await asyncio.wait([waiting], timeout=0.2)
    assert not done
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await episode.close()
    assert ledger.count("teardown") == 1


async def test_a_finished_episode_is_torn_down_once_however_often_it_is_closed(fake_bundle, ledger):
    episode, _, result = await play(fake_bundle, "echo", [("echo", {"text": "a"})], ["a"])
    assert episode.closed  # the last end_turn closed it
    assert await episode.close() == result
    assert await asyncio.gather(episode.close(), episode.close()) == [result, result]
    assert ledger.count("teardown") == 1


async def test_starting_an_episode_twice_is_refused(fake_bundle):
    episode = Episode(fake_bundle, fake_bundle.task("echo"))
    await episode.start()
    with pytest.raises(RuntimeError, match="create a new Episode for each play"):
        await episode.start()
    await episode.close()


async def test_calling_a_tool_before_start_is_an_error_saying_to_start(fake_bundle):
    episode = Episode(fake_bundle, fake_bundle.task("echo"))
    with pytest.raises(RuntimeError, match=r"call Episode.start\(\) first"):
        await episode.call("echo", {"text": "x"})
    with pytest.raises(RuntimeError, match=r"call Episode.start\(\) first"):
        await episode.end_turn("x")
