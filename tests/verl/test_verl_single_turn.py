"""AgentEnvSingleTurnLoop under verl's legacy trainer (``trainer.use_v1=false``): verl's own AgentLoopWorker plays
single-turn rows of the verdicts bundle through the loop registered by the written agent_loop.yaml, with verl's
own RewardLoopWorker beside it (a stand-in for its Ray actor handle); verl's own GRPO advantage and loss
aggregation read the result. A sample without a verdict is masked: no gradient, no tokens in the loss, reward 0
and ``error`` 1.0, its 0 still in its group's statistics. The plain reward function raises instead, which stops
the legacy trainer's batch. With verl's ``dapo`` reward manager the loop applies the same overlong penalty."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from agentenv_verl import NoVerdictError, Written, write
from agentenv_verl.reward import KEYS

from tests.support.verl import VERDICTS, ScriptedServer, generate, prompts, replies, trainer_config

with warnings.catch_warnings():  # verl's trainer imports every training engine; those not installed warn
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
    from verl.trainer.ppo.ray_trainer import compute_advantage

pytestmark = pytest.mark.filterwarnings("ignore:.*[Ll]egacy.*:DeprecationWarning", "ignore::FutureWarning")

ASK = "Say the word on the board."  # the verdicts bundle's one train task (judged)
SINGLE = "actor_rollout_ref.rollout.agent.default_agent_loop=agentenv_single"


@pytest.fixture
def verdicts(serve, tmp_path) -> tuple[Any, Written]:
    """A verdicts-bundle server and its single-turn rows (the two-turn task left out)."""
    server = serve(VERDICTS)
    written = write(server.url, tmp_path / "rows", single_turn=True, attempts=1, reset_timeout=5)
    assert written.left_out == {"train": ["two-step"]}
    return server, written


def legacy_config(model_dir: Path, written: Written, n: int, *overrides: str) -> Any:
    return trainer_config(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={written.agent_loop_config}",
        "data.max_prompt_length=512",
        "data.max_response_length=64",
        "trainer.use_v1=false",
        "algorithm.adv_estimator=grpo",
        *overrides,
    )


async def test_under_the_legacy_trainer_a_sample_without_a_verdict_is_masked_with_the_same_keys(
    verdicts, tokenizer, model_dir, tmp_path
):
    _, written = verdicts
    config = legacy_config(model_dir, written, 2, SINGLE)
    model = ScriptedServer(tokenizer, {ASK: ["right<|im_end|>", "BREAK<|im_end|>"]})  # the judge breaks on BREAK

    out = await generate(config, model, prompts(written.files["train"], tokenizer, 2, tmp_path))

    said = replies(tokenizer, out)
    judged, kept_out = said.index("right"), said.index("BREAK")
    assert out.batch["response_mask"][kept_out].sum() == 0  # no gradient, no tokens in the loss
    assert out.batch["response_mask"][judged].sum() > 0
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0 if i == judged else 0.0 for i in range(2)]
    assert out.meta_info["reward_extra_keys"] == list(KEYS)
    assert out.non_tensor_batch["error"][kept_out] == 1.0 and out.non_tensor_batch["error"][judged] == 0.0
    assert out.non_tensor_batch["score"][kept_out] == 0.0 and out.non_tensor_batch["acc"][judged] == 1.0


async def test_verls_grpo_gives_a_masked_sample_no_advantage_and_counts_its_zero_in_the_group(
    verdicts, tokenizer, model_dir, tmp_path
):
    _, written = verdicts
    config = legacy_config(model_dir, written, 2, SINGLE)
    model = ScriptedServer(tokenizer, {ASK: ["right<|im_end|>", "BREAK<|im_end|>"]})
    batch = prompts(written.files["train"], tokenizer, 2, tmp_path)

    out = await generate(config, model, batch)
    batch = batch.union(out)
    batch.batch["token_level_scores"] = batch.batch["rm_scores"]
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    batch = compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO, num_repeat=2, config=config.algorithm)

    said = replies(tokenizer, out)
    judged, kept_out = said.index("right"), said.index("BREAK")
    advantages, mask = batch.batch["advantages"], batch.batch["response_mask"]
    assert advantages[kept_out].abs().sum() == 0
    # the group is {1.0, 0.0}: mean 0.5, std 0.707 (the masked 0 counts; alone it would get 1.0)
    assert advantages[judged][mask[judged].bool()].tolist() == pytest.approx(
        [0.5 / math.sqrt(0.5)] * int(mask[judged].sum()), rel=1e-4
    )


async def test_seq_mean_loss_modes_are_diluted_by_a_masked_sample_and_token_mean_is_not(
    verdicts, tokenizer, model_dir, tmp_path
):
    _, written = verdicts
    config = legacy_config(model_dir, written, 2, SINGLE)
    model = ScriptedServer(tokenizer, {ASK: ["right<|im_end|>", "BREAK<|im_end|>"]})

    out = await generate(config, model, prompts(written.files["train"], tokenizer, 2, tmp_path))
    mask = out.batch["response_mask"].float()
    loss = torch.ones_like(mask)  # every token of every sample: a loss of 1

    # verl's trainers pass the mini-batch's sample count as global_batch_size, masked samples included
    token_mean = agg_loss(loss, mask, "token-mean", batch_num_tokens=mask.sum())
    seq_mean = agg_loss(loss, mask, "seq-mean-token-mean", global_batch_size=len(mask))

    assert token_mean.item() == pytest.approx(1.0)
    assert seq_mean.item() == pytest.approx(0.5)  # the masked sample's 0 in the mean over samples


async def test_under_the_legacy_trainer_the_plain_reward_functions_raise_says_to_use_the_single_turn_loop(
    verdicts, tokenizer, model_dir, tmp_path
):
    server, written = verdicts
    config = legacy_config(
        model_dir,
        written,
        2,
        "reward.custom_reward_function.path=pkg://agentenv_verl.reward",
        f"+reward.custom_reward_function.reward_kwargs.url={server.url}",
        "+reward.custom_reward_function.reward_kwargs.attempts=1",
    )  # verl's own single_turn_agent plays the rows; its reward step calls compute_score
    model = ScriptedServer(tokenizer, {ASK: ["right<|im_end|>", "BREAK<|im_end|>"]})

    with pytest.raises(NoVerdictError) as raised:
        await generate(config, model, prompts(written.files["train"], tokenizer, 2, tmp_path))

    assert raised.value.kind == "verifier"
    assert (
        "Under the legacy trainer (trainer.use_v1=false) this raise stops training: use agentenv_verl's single-turn "
        "loop (actor_rollout_ref.rollout.agent.default_agent_loop=agentenv_single)" in str(raised.value)
    )


DAPO = (
    "reward.reward_manager.name=dapo",
    "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
    "+reward.reward_kwargs.overlong_buffer_cfg.len=8",
    "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
    "+reward.reward_kwargs.overlong_buffer_cfg.log=true",
    "+reward.reward_kwargs.max_resp_len=16",
    "data.max_response_length=16",
)


async def test_with_dapos_manager_the_loop_applies_the_overlong_penalty_verl_would(
    verdicts, tokenizer, model_dir, tmp_path
):
    server, written = verdicts
    # 5 tokens (no penalty), 15 (7 into the 8-token buffer: -0.4375), over 16 (cut at 16: -0.5)
    said = ["right<|im_end|>", "right right right<|im_end|>", "wrong " * 20 + "<|im_end|>"]
    reward = (
        "reward.custom_reward_function.path=pkg://agentenv_verl.reward",
        f"+reward.custom_reward_function.reward_kwargs.url={server.url}",
    )

    def run(*loop: str) -> Any:
        config = legacy_config(model_dir, written, 3, *DAPO, *reward, *loop)
        return generate(
            config,
            ScriptedServer(tokenizer, {ASK: list(said)}),
            prompts(written.files["train"], tokenizer, 3, tmp_path),
        )

    by_verl = await run()  # verl's single_turn_agent, and verl's dapo reward manager calling compute_score
    by_loop = await run(SINGLE)

    def by_reply(out: DataProto) -> dict[str, tuple[float, float, bool]]:
        extra = out.non_tensor_batch
        return {
            text: (round(out.batch["rm_scores"][i].sum().item(), 5), round(float(extra["overlong_reward"][i]), 5),
                   bool(extra["overlong"][i]))
            for i, text in enumerate(replies(tokenizer, out))
        }  # fmt: skip

    assert by_reply(by_loop) == by_reply(by_verl)
    assert sorted(by_reply(by_verl).values()) == [(-0.5, -0.5, True), (-0.4375, -0.4375, True), (1.0, 0.0, False)]
    assert set(by_loop.meta_info["reward_extra_keys"]) == set(KEYS) | {"overlong_reward", "overlong"}
