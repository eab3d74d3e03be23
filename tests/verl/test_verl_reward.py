"""agentenv_verl.reward.compute_score on real servers (the fake bundle, and the arith example beside it), loaded
the way verl loads a reward function: ``get_custom_reward_fn`` of verl's own trainer config, ``pkg://`` path,
``reward_kwargs`` bound with ``partial``. A sample without a verdict raises NoVerdictError, never a 0."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from agentenv_verl import NoVerdictError, RewardConfigError, RolloutFailed
from agentenv_verl.keptout import COUNTER, KeptOut
from agentenv_verl.reward import KEYS, compute_score, make_compute_score, make_reward_fn
from verl.trainer.ppo.reward import get_custom_reward_fn

from tests.support import ServeProcess
from tests.support.verl import ARITH, FAKE, ScriptedServer, make_loop, tool_call, trainer_config

FAST = {"reset_timeout": 3, "attempts": 1}  # a failure is given up at once: these tests are about the verdict


@pytest.fixture
def reward_server(serve):
    """The fake bundle served for the reward function, its deploys and verifiers under a 1 s deadline."""
    return serve(FAKE, reset_timeout=1)


def score(url: str, task: str, response: str, **options) -> dict[str, float]:
    return compute_score("agentenv/fake", response, "", {"task_id": task}, url=url, **{**FAST, **options})


def test_a_response_is_scored_by_its_tasks_verifiers_in_verls_dict_form(reward_server):
    right = score(reward_server.url, "bash", "hi")  # the bash task's verifier: the reply contains 'hi'
    wrong = score(reward_server.url, "echo", "ping")  # echo's verifier wants an echo call first: a single turn has none

    assert right == {"score": 1.0, "passed": 1.0, "error": 0.0, "acc": 1.0}
    assert wrong == {"score": 0.0, "passed": 0.0, "error": 0.0, "acc": 0.0}
    assert tuple(right) == tuple(wrong) == KEYS  # the same keys on every call


def test_end_of_turn_tokens_are_dropped_before_the_reply_is_judged(serve):
    arith = serve(ARITH)
    answer = "58<|im_end|>\n<|endoftext|><|endoftext|>"  # one-151: What is 19 plus 39? (an exact verifier)

    scored = compute_score("agentenv/arith", answer, "", {"task_id": "one-151"}, url=arith.url, **FAST)

    assert scored["score"] == 1.0


@pytest.mark.parametrize(
    ("task", "kind"),
    [
        ("no-verdict", "unscored"),  # its verifier gives no verdict
        ("broken-verifier", "verifier"),  # its verifier raises
        ("deploy-fails", "deploy"),
        ("deploy-hangs", "deadline"),
    ],
)
def test_a_response_without_a_verdict_raises_no_verdict_error(reward_server, task, kind):
    with pytest.raises(NoVerdictError) as raised:
        score(reward_server.url, task, "anything")

    assert raised.value.kind == kind
    assert (raised.value.task_id, raised.value.data_source) == (task, "agentenv/fake")


def test_the_no_verdict_message_says_what_each_trainer_does_next(reward_server):
    with pytest.raises(NoVerdictError) as raised:
        score(reward_server.url, "deploy-fails", "x")

    message = str(raised.value)
    assert "no verdict for task 'deploy-fails' of agentenv/fake" in message
    assert "kept out of training, never scored as 0" in message
    assert (
        "Under verl's V1 trainer (trainer.use_v1, the default since verl 0.9) the sample's session fails, its prompt "
        "group is recorded as failed and the GRPO statistics come from the other samples" in message
    )
    assert "Under the legacy trainer (trainer.use_v1=false) this raise stops training" in message
    assert "default_agent_loop=agentenv_single" in message


def test_a_server_gone_is_no_verdict(tmp_path):
    server = ServeProcess(FAKE).start()
    score(server.url, "bash", "hi")  # served
    server.kill()

    with pytest.raises(NoVerdictError) as raised:
        score(server.url, "bash", "hi", reset_timeout=0.5)

    assert raised.value.kind == "unreachable"


def test_a_multi_turn_task_is_refused_pointing_to_the_agent_loop(reward_server):
    with pytest.raises(RewardConfigError, match=r"task 'two-turn' of agentenv/fake has 2 turns") as refused:
        score(reward_server.url, "two-turn", "hello")

    assert "AgentEnvAgentLoop" in str(refused.value)


def test_verl_loads_it_from_the_package_and_one_run_mixes_bundles_and_servers(reward_server, serve):
    arith = serve(ARITH)
    config = trainer_config(
        "reward.custom_reward_function.path=pkg://agentenv_verl.reward",
        f"+reward.custom_reward_function.reward_kwargs.servers={{agentenv/fake:'{reward_server.url}',"
        f"agentenv/arith:'{arith.url}'}}",
        "+reward.custom_reward_function.reward_kwargs.attempts=1",
    )
    assert config.reward.custom_reward_function.name == "compute_score"  # verl's default name
    reward_fn = get_custom_reward_fn(config)

    # as verl's reward managers call it: keywords, numpy values from its batches, and its router kwargs
    fake_row = {"task_id": np.str_("bash"), "index": np.int64(3), "split": "train", "num_turns": np.int32(2)}
    arith_row = {"task_id": np.str_("one-151"), "index": np.int64(0)}
    router = {"reward_router_address": "127.0.0.1:1", "reward_model_tokenizer": None}
    scored = [
        reward_fn(data_source=np.str_("agentenv/fake"), solution_str="hi", ground_truth="", extra_info=fake_row),
        reward_fn(data_source="agentenv/arith", solution_str="58", ground_truth="", extra_info=arith_row, **router),
        reward_fn(data_source="agentenv/arith", solution_str="59", ground_truth="", extra_info=arith_row),
    ]

    assert [s["score"] for s in scored] == [1.0, 1.0, 0.0]


def test_reward_kwargs_override_what_the_call_passes(reward_server):
    config = trainer_config(
        "reward.custom_reward_function.path=pkg://agentenv_verl.reward",
        f"+reward.custom_reward_function.reward_kwargs.url={reward_server.url}",
    )
    reward_fn = get_custom_reward_fn(config)

    # verl merges reward_kwargs over the call's kwargs: the bound url wins over a wrong one at call time
    scored = reward_fn(data_source="agentenv/fake", solution_str="hi", extra_info={"task_id": "bash"}, url="http://x:1")

    assert scored["score"] == 1.0


def test_a_data_source_without_a_server_is_refused_naming_the_setting(reward_server):
    with pytest.raises(RewardConfigError, match=r"no agentenv server for data_source 'agentenv/other'"):
        compute_score("agentenv/other", "x", "", {"task_id": "bash"}, servers={"agentenv/fake": reward_server.url})
    with pytest.raises(RewardConfigError, match=r"is not the bundle .* serves \(agentenv/fake\)"):
        compute_score("agentenv/arith", "x", "", {"task_id": "bash"}, url=reward_server.url)
    with pytest.raises(RewardConfigError, match=r"reward_kwargs.servers .* or reward_kwargs.url"):
        compute_score("agentenv/fake", "x", "", {"task_id": "bash"})
    with pytest.raises(RewardConfigError, match=r"has no extra_info.task_id"):
        compute_score("agentenv/fake", "x", "", {"index": 0}, url=reward_server.url)


def test_make_compute_score_binds_a_server_for_a_module_of_your_own(reward_server):
    bound = make_compute_score(url=reward_server.url, attempts=1)

    assert bound("agentenv/fake", "hi", "", {"task_id": "bash"})["score"] == 1.0
    with pytest.raises(NoVerdictError):
        bound(data_source="agentenv/fake", solution_str="x", ground_truth="", extra_info={"task_id": "no-verdict"})


def test_make_reward_fn_scores_a_batch_with_none_for_a_sample_without_a_verdict(reward_server):
    reward_fn = make_reward_fn(url=reward_server.url, attempts=1, reset_timeout=3)

    scored = reward_fn(
        data_sources=["agentenv/fake"] * 3,
        solution_strs=["hi<|im_end|>", "x", "ping"],
        ground_truths=["", "", ""],
        extra_infos=[{"task_id": "bash"}, {"task_id": "deploy-fails"}, {"task_id": "echo"}],
    )

    assert [s and s["score"] for s in scored] == [1.0, None, 0.0]


def test_every_judged_sample_is_counted_in_the_process_count(reward_server):
    before = (COUNTER.total_samples, COUNTER.total_kept)
    score(reward_server.url, "bash", "hi")
    with pytest.raises(NoVerdictError):
        score(reward_server.url, "no-verdict", "x")
    with pytest.raises(RewardConfigError):
        score(reward_server.url, "two-turn", "x")  # a configuration error is not a judged sample

    assert (COUNTER.total_samples - before[0], COUNTER.total_kept - before[1]) == (2, 1)


async def test_agentenv_agent_loop_counts_in_the_same_process_count(reward_server, tokenizer, fake_rows):
    before = (COUNTER.total_samples, COUNTER.total_kept)
    model = ScriptedServer(tokenizer, [tool_call("echo", text="x"), "x<|im_end|>"])

    with pytest.raises(RolloutFailed):
        await make_loop(tokenizer, model, reward_server.url, attempts=1).run({}, **fake_rows["deploy-fails"])

    assert (COUNTER.total_samples - before[0], COUNTER.total_kept - before[1]) == (1, 1)


def _feed(counter: KeptOut, kept: int, samples: int = 100) -> list[bool]:
    """``samples`` judged samples, the last ``kept`` of them kept out; what each note returned."""
    return [counter.note("deploy" if i >= samples - kept else None) for i in range(samples)]


def test_five_kept_out_in_a_block_of_a_hundred_say_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="agentenv_verl")

    assert not any(_feed(KeptOut(), kept=5))
    assert caplog.records == []


def test_six_kept_out_in_a_block_of_a_hundred_warn_once_with_the_count(caplog):
    caplog.set_level(logging.WARNING, logger="agentenv_verl")
    counter = KeptOut()

    warned = _feed(counter, kept=6) + _feed(counter, kept=7, samples=50)  # the next block warns again at its 6th

    assert [i for i, w in enumerate(warned) if w] == [99, 100 + 50 - 7 + 5]
    first = caplog.records[0].getMessage()
    assert "6 of the last 100 samples judged in this worker process" in first
    assert "(deploy 6): more than 5 in a block of 100" in first
    assert "Counted per worker process" in first
