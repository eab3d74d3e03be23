"""Harness rollouts end to end, without a trainer: a task's own agent through OpenEnv's real capture proxy to a
stand-in vLLM engine, scored by the task's verifiers; every failure unscored; close, deadlines, queued sessions."""

from __future__ import annotations

import pickle
import threading

import pytest
from agentenv import faults
from agentenv.errors import EpisodeLost

from tests.support import wait_until
from tests.support.bundles import copy_bundle, patch
from tests.support.harness import HARNESS, PLACEHOLDER, Engine, prompt_of
from tests.support.procs import group_gone


def play(factory, task_id, split="train"):
    session = factory.create(prompt_of(HARNESS, task_id, split))
    try:
        code = session.wait_for_completion()
        return session, code
    except TimeoutError:
        return session, None


def test_the_agents_call_is_captured_as_one_trainable_turn_and_scored(make_factory):
    factory = make_factory(split="train")
    session, code = play(factory, "direct")
    trace = session.fetch_training_trace()
    verdict = session.verify([])
    session.close()
    assert code == 0 and verdict.env_reward == 1.0 and verdict.metrics["scores"] == {"answer": 1.0}
    [turn] = trace.turns
    completion = len(turn.completion_token_ids)
    assert completion > 0 and len(turn.per_token_logps) == completion
    assert sum(turn.loss_mask) == completion and not any(turn.loss_mask[: len(turn.prompt_token_ids)])


def test_a_tool_call_over_mcp_is_the_episodes_call(make_factory):
    factory = make_factory(split="train")
    session, _ = play(factory, "multiply")
    trace = session.fetch_training_trace()
    verdict = session.verify([])
    session.close()
    # used-tool checks the env's own record: the agent's MCP call ran in the episode
    assert verdict.env_reward == 1.0 and verdict.metrics["scores"] == {"answer": 1.0, "used-tool": 1.0}
    assert len(trace.turns) == 2


def test_a_later_turn_resumes_the_agent_and_every_turn_is_scored(make_factory):
    factory = make_factory(split="train")
    session, _ = play(factory, "two-turn")
    trace = session.fetch_training_trace()
    verdict = session.verify([])
    session.close()
    assert verdict.env_reward == 1.0 and verdict.metrics["scores"] == {"first": 1.0, "second": 1.0}
    assert verdict.metrics["solver_runs"] == 2 and len(trace.turns) == 4


def test_the_policy_version_a_rollout_starts_with_is_kept_for_all_its_calls():
    served = Engine(["tiny/policy", "trl-policy-v1"])
    try:
        from agentenv_harness import AgentEnvSessionFactory

        def publish_v2(body):  # the trainer publishes a newer adapter while the first rollout runs
            if body.get("model") == "trl-policy-v1" and "trl-policy-v2" not in served.state.models:
                served.state.models.append("trl-policy-v2")

        factory = AgentEnvSessionFactory(HARNESS, llm_url=served.url, model="tiny/policy", lora_name="trl-policy",
                                         split="train", deadline=120)  # fmt: skip
        try:
            served.state.on_chat = publish_v2
            first, _ = play(factory, "two-turn")
            first_models = {r["model"] for r in served.chats()}
            second, _ = play(factory, "direct")
            verdicts = [first.verify([]), second.verify([])]
            first.close()
            second.close()
        finally:
            factory.close()
    finally:
        served.server.stop()
    assert first.model == "trl-policy-v1" and first_models == {"trl-policy-v1"}
    assert second.model == "trl-policy-v2" and {r["model"] for r in served.chats()} == {
        "trl-policy-v1",
        "trl-policy-v2",
    }
    assert [v.env_reward for v in verdicts] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("task_id", "kind", "says"),
    [
        ("crash", "crash", "exited with 3 on turn 1"),
        ("silent", "crash", "made no model call through the capture proxy"),
        ("unstartable", "deploy", "could not be started"),
        ("deploy-fails", "deploy", "the calculator's deploy failed on purpose"),
    ],
)
def test_a_failed_run_is_unscored_and_its_trace_is_refused_as_lost(make_factory, task_id, kind, says):
    factory = make_factory(split="faults")
    session, _ = play(factory, task_id, "faults")
    with pytest.raises(EpisodeLost) as info:
        session.fetch_training_trace()
    verdict = session.verify([])
    session.close()
    assert not isinstance(info.value, ValueError | TypeError | KeyError)  # those would stop TRL's worker
    assert info.value.failure.kind == kind and says in info.value.failure.message
    assert faults.rule(kind).outcome == "failed"
    assert verdict.env_reward is None and verdict.metrics["failure"] == kind


def test_a_rollout_past_its_deadline_is_torn_down_before_its_timeout_error(make_factory, engine):
    factory = make_factory(split="faults", deadline=8.0)
    session = factory.create(prompt_of(HARNESS, "hang", "faults"))
    assert wait_until(lambda: session.play is not None and session.play.solver_pid is not None)
    pid = session.play.solver_pid
    with pytest.raises(TimeoutError, match="longer than its deadline"):
        session.wait_for_completion()
    gone_when_raised = group_gone(pid)  # the agent and the child it started, before the error reached us
    closed = session.play.report is not None
    with pytest.raises(EpisodeLost) as info:
        session.fetch_training_trace()
    session.close()
    assert gone_when_raised and closed
    assert info.value.failure.kind == "deadline" and session.verify([]).env_reward is None


def test_close_mid_run_returns_after_teardown_with_no_process_left(make_factory, engine):
    factory = make_factory(split="faults")
    session = factory.create(prompt_of(HARNESS, "hang", "faults"))
    assert wait_until(lambda: session.play is not None and session.play.solver_pid is not None)
    pid, key = session.play.solver_pid, None
    assert wait_until(lambda: factory.proxy.calls(session.key) == 1)  # the agent is in its sleep now
    key = session.key
    returned: list[tuple[bool, bool]] = []

    def close() -> None:  # TRL closes from its pool thread and from its stop path, at once
        session.close()
        returned.append((group_gone(pid), session.play.report is not None))

    threads = [threading.Thread(target=close) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert returned == [(True, True), (True, True)]
    assert factory.proxy.app.state.registry.get(key) is None  # the capture session was deleted
    assert session.verify([]).env_reward is None and session not in factory._live


def test_a_session_closed_before_it_runs_never_runs(make_factory, engine):
    factory = make_factory(split="faults", max_concurrent=1)
    running = factory.create(prompt_of(HARNESS, "hang", "faults"))
    assert wait_until(lambda: running.play is not None and running.play.solver_pid is not None)
    queued = factory.create(prompt_of(HARNESS, "crash", "faults"))
    queued.close()
    running.close()
    assert queued.play is None and queued.key is None and queued.model is None
    assert queued.verify([]).env_reward is None
    with pytest.raises(EpisodeLost, match="closed before"):
        queued.fetch_training_trace()


def test_only_the_solver_gets_the_proxy_a_judge_asks_its_own_endpoint(make_factory, engine, tmp_path):
    judge = Engine(["tiny/judge"], mode="text")
    try:
        bundle = copy_bundle(tmp_path, HARNESS)
        patch(bundle / "tasks" / "judged.yaml", f"{{base_url: '{PLACEHOLDER}', model: tiny/judge}}",
              f"{{base_url: '{judge.url}/v1', model: tiny/judge}}")  # fmt: skip
        factory = make_factory(bundle, split="judged")
        session = factory.create(prompt_of(bundle, "judged", "judged"))
        session.wait_for_completion()
        trace = session.fetch_training_trace()
        verdict = session.verify([])
        session.close()
        judged = judge.chats()
    finally:
        judge.server.stop()
    assert verdict.env_reward == 1.0 and verdict.metrics["scores"] == {"judged": 1.0}
    assert [r["model"] for r in judged] == ["tiny/judge"] and "Rubric:" in str(judged[0]["messages"])
    assert not engine.saw("Rubric:")  # nothing of the judge's reached the policy
    assert not any("Rubric:" in str(turn.request) for turn in trace.turns)


def test_a_user_simulator_writes_the_next_prompt_against_its_own_endpoint(make_factory, engine, tmp_path):
    user = Engine(["tiny/user"], mode="text")
    try:
        bundle = copy_bundle(tmp_path, HARNESS)
        patch(bundle / "tasks" / "judged.yaml", f"{{base_url: '{PLACEHOLDER}', model: tiny/user}}",
              f"{{base_url: '{user.url}/v1', model: tiny/user}}")  # fmt: skip
        factory = make_factory(bundle, split="judged")
        session = factory.create(prompt_of(bundle, "user-sim", "judged"))
        session.wait_for_completion()
        verdict = session.verify([])
        session.close()
        simulated = user.chats()
    finally:
        user.server.stop()
    assert verdict.env_reward == 1.0 and verdict.metrics["scores"] == {"first": 1.0, "second": 1.0}
    assert [r["model"] for r in simulated] == ["tiny/user"] and "You play the user" in str(simulated[0]["messages"])
    assert not engine.saw("You play the user")


def test_the_factory_pickles_as_its_arguments(make_factory, engine):
    factory = make_factory(split="train", deadline=60.0)
    copy = pickle.loads(pickle.dumps(factory))
    try:
        assert copy is not factory and copy.proxy.url != factory.proxy.url
        assert [t.id for t in copy.tasks] == [t.id for t in factory.tasks] and copy.deadline == 60.0
    finally:
        copy.close()


def test_an_engine_without_token_ids_is_refused_naming_the_vllm_flags():
    from agentenv.errors import AgentEnvError
    from agentenv_harness import AgentEnvSessionFactory

    hosted = Engine(["tiny/policy"], mode="text")
    try:
        with pytest.raises(AgentEnvError) as info:
            AgentEnvSessionFactory(HARNESS, llm_url=hosted.url, model="tiny/policy", split="train")
    finally:
        hosted.server.stop()
    message = str(info.value)
    assert f"the engine at {hosted.url} (tiny/policy) cannot be trained on through the capture proxy" in message
    assert "--return-tokens-as-token-ids --logprobs-mode processed_logprobs" in message


def test_left_out_tasks_do_not_stop_the_others_and_a_prompt_for_one_is_refused_naming_why(make_factory):
    from agentenv.errors import AgentEnvError

    factory = make_factory(split="leftout")  # a judge key unset, an agent not installed...: the kept task trains
    assert [t.id for t in factory.tasks] == ["kept"]
    with pytest.raises(AgentEnvError, match="task 'agent-absent' is left out of harness training: program"):
        factory.create([{"role": "system", "content": "agentenv task: harness/agent-absent"}])
    session, _ = play(factory, "kept", "leftout")
    assert session.verify([]).env_reward == 1.0
    session.close()


def test_an_engine_gone_before_the_rollout_started_makes_it_unscored(make_factory):
    gone = Engine(["tiny/policy"])
    factory = make_factory(split="train", llm_url=gone.url)
    gone.server.stop()
    session, _ = play(factory, "direct")
    with pytest.raises(EpisodeLost) as info:
        session.fetch_training_trace()
    session.close()
    assert info.value.failure.kind == "deploy" and "the capture session could not be opened" in str(info.value)
    assert session.verify([]).env_reward is None and session.play is None
