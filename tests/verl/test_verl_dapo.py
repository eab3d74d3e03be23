"""``agentenv verl dapo URL OUT``: its config composes with verl's own ppo_trainer config by Hydra, as verl's
entry point composes it (``--config-path OUT --config-name dapo``), and verl loads the dapo reward manager and
the written reward function from it."""

from __future__ import annotations

import json
import warnings

import pytest
from agentenv.cli import main as agentenv_main
from agentenv_verl import write_dapo
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager

from tests.support.verl import VERDICTS, ScriptedServer, generate, prompts, replies

with warnings.catch_warnings():  # verl's trainer imports every training engine; those not installed warn
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

pytestmark = pytest.mark.filterwarnings("ignore:.*[Ll]egacy.*:DeprecationWarning", "ignore::FutureWarning")


def test_the_dapo_config_composes_with_verls_config_and_loads_the_manager_and_the_reward_function(
    serve, tokenizer, model_dir, tmp_path
):
    server = serve(VERDICTS)
    dapo = write_dapo(server.url, tmp_path / "run", max_response_length=64, overlong_buffer=16, rollout_n=4)

    with initialize_config_dir(config_dir=str(dapo.config.parent), version_base=None):
        config = compose(config_name="dapo", overrides=[f"actor_rollout_ref.model.path={model_dir}"])

    assert config.trainer.use_v1  # verl's own defaults are there; ours changed only these
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "agentenv_single"
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(dapo.written.agent_loop_config)
    assert config.actor_rollout_ref.rollout.n == 4
    assert (config.actor_rollout_ref.actor.clip_ratio_low, config.actor_rollout_ref.actor.clip_ratio_high) == (
        0.2,
        0.28,
    )
    assert config.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert config.algorithm.adv_estimator == "grpo"
    assert (config.algorithm.filter_groups.enable, config.algorithm.filter_groups.metric) == (True, "acc")
    assert config.data.train_files == str(dapo.written.files["train"])
    assert config.data.val_files == str(dapo.written.files["eval"])
    assert config.reward.reward_kwargs.max_resp_len == config.data.max_response_length == 64
    assert "custom_reward_function" not in config or config.custom_reward_function.path is None  # not the legacy key

    manager = load_reward_manager(config, tokenizer)
    assert isinstance(manager, DAPORewardManager)
    assert (manager.overlong_buffer_cfg.len, manager.max_resp_len) == (16, 64)

    reward_fn = get_custom_reward_fn(config)
    scored = reward_fn(data_source="agentenv/verdicts", solution_str="right<|im_end|>", ground_truth="",
                       extra_info={"task_id": "judged", "split": "train", "index": 0})  # fmt: skip
    assert scored == {"score": 1.0, "passed": 1.0, "error": 0.0, "acc": 1.0}


async def test_a_dapo_run_scores_in_the_single_turn_loop_with_the_written_reward_module_and_the_penalty(
    serve, tokenizer, model_dir, tmp_path
):
    server = serve(VERDICTS)
    dapo = write_dapo(server.url, tmp_path / "run", max_response_length=16, overlong_buffer=8, rollout_n=3)
    with initialize_config_dir(config_dir=str(dapo.config.parent), version_base=None):
        config = compose(
            config_name="dapo",
            overrides=[f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm",
                       "data.max_prompt_length=512", "trainer.use_v1=false"],
        )  # fmt: skip
    model = ScriptedServer(tokenizer, {"Say the word on the board.": ["right<|im_end|>", "right right right<|im_end|>",
                                                                      "BREAK<|im_end|>"]})  # fmt: skip

    # verl's legacy agent loop worker: the rows name no loop, so dapo.yaml's default (agentenv_single) plays them
    out = await generate(config, model, prompts(dapo.written.files["train"], tokenizer, 3, tmp_path))

    by_reply = {text: i for i, text in enumerate(replies(tokenizer, out))}
    rewards = out.batch["rm_scores"].sum(-1).tolist()
    assert rewards[by_reply["right"]] == 1.0
    assert rewards[by_reply["right right right"]] == -7 / 8  # scored 0, 15 tokens: 7 into the 8-token buffer
    assert rewards[by_reply["BREAK"]] == 0.0 and out.batch["response_mask"][by_reply["BREAK"]].sum() == 0
    assert out.non_tensor_batch["error"].tolist() == [1.0 if i == by_reply["BREAK"] else 0.0 for i in range(3)]


def test_agentenv_verl_dapo_writes_the_run_and_says_how_to_start_it(serve, tmp_path, capsys):
    server = serve(VERDICTS)

    assert agentenv_main(["verl", "dapo", server.url, str(tmp_path / "run"), "--quiet"]) == 0

    out = capsys.readouterr().out
    files = ["agent_loop.yaml", "agentenv_reward.py", "dapo.yaml", "eval.parquet", "train.parquet"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [*files[:4], "manifest.json", files[4]]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == files  # the reward module and the config are part of the set
    assert "left out 1 multi-turn task(s) of train (two-step)" in out
    assert f"--config-path {tmp_path / 'run'} --config-name dapo" in out
    assert f"url={server.url!r}" in (tmp_path / "run" / "agentenv_reward.py").read_text()
