"""What AgentEnvAgentLoop refuses (configuration errors raise, never replayed), the supported verl
range, and the written loop config instantiated by verl's own AgentLoopWorker."""

from __future__ import annotations

import importlib.metadata as md

import pytest
import verl
import yaml
from agentenv_verl import SUPPORTED, LoopConfigError, write
from agentenv_verl._version import check_verl
from agentenv_verl.loop import AgentEnvAgentLoop
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from tests.support.verl import ScriptedServer, make_loop, tool_call, trainer_config, verl_config

SAMPLING = {"temperature": 1.0}


async def test_a_first_prompt_over_prompt_length_is_refused_not_cut(tokenizer, fake_rows, fake_server, ledger):
    model = ScriptedServer(tokenizer, ["ping<|im_end|>"] * 3)
    loop = make_loop(tokenizer, model, fake_server.url, config=verl_config(prompt_length=200), attempts=3)

    with pytest.raises(LoopConfigError, match=r"over actor_rollout_ref.rollout.prompt_length=200") as refused:
        await loop.run(SAMPLING, **fake_rows["echo"])

    assert "losing the system prompt and the tools" in str(refused.value)
    assert "--max-prompt-length" in str(refused.value)
    assert model.prompts == []
    assert ledger.count("deploy") <= 1  # not replayed


async def test_an_episode_that_ends_unscored_raises(tokenizer, fake_rows, fake_server):
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, ["anything<|im_end|>"] * 3), fake_server.url)

    with pytest.raises(LoopConfigError, match=r"task 'no-verdict' ended unscored without an env failure"):
        await loop.run(SAMPLING, **fake_rows["no-verdict"])


async def test_a_loop_run_twice_raises(tokenizer, fake_rows, fake_server):
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, ["ping<|im_end|>"] * 2), fake_server.url)
    await loop.run(SAMPLING, **fake_rows["echo"])

    with pytest.raises(LoopConfigError, match="run was called twice on one instance"):
        await loop.run(SAMPLING, **fake_rows["echo"])


async def test_a_row_the_writer_did_not_write_is_refused(tokenizer, fake_rows, fake_server):
    row = dict(fake_rows["echo"], extra_info={"index": 0})
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, []), fake_server.url)

    with pytest.raises(LoopConfigError, match="python -m agentenv_verl URL OUT"):
        await loop.run(SAMPLING, **row)


async def test_a_row_whose_tools_the_server_no_longer_offers_is_refused(tokenizer, fake_rows, fake_server):
    other_tools = fake_rows["no-add"]["extra_info"]["tools"]
    row = dict(fake_rows["echo"], extra_info=dict(fake_rows["echo"]["extra_info"], tools=other_tools))
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, []), fake_server.url)

    with pytest.raises(LoopConfigError, match=r"other tools \(.*\) than its dataset row lists"):
        await loop.run(SAMPLING, **row)


def test_the_installed_verl_fits_and_one_outside_the_range_is_refused():
    assert check_verl() == md.version("verl") == verl.__version__
    with pytest.raises(ImportError) as refused:
        check_verl("0.10.0")
    assert str(refused.value) == (
        f"agentenv-verl supports {SUPPORTED}, but verl 0.10.0 is installed: pip install '{SUPPORTED}' "
        "(or pip install 'agentenv-verl[verl]')"
    )


async def test_verls_worker_instantiates_the_written_loop_and_batches_its_rewards(
    tokenizer, model_dir, fake_server, tmp_path
):
    written = write(fake_server.url, tmp_path / "out")
    entry, _ = yaml.safe_load(written.agent_loop_config.read_text())
    config = trainer_config(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={written.agent_loop_config}",
        "data.max_prompt_length=4096",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=false",
    )
    model = ScriptedServer(
        tokenizer,
        {
            "Echo the word 'ping'": [tool_call("echo", text="ping"), "ping<|im_end|>"],
            "Say yes.": ["yes<|im_end|>", "nope<|im_end|>"],
        },
    )

    worker = AgentLoopWorker(config, llm_client=model)  # loads agent_loop.yaml into verl's registry
    dataset = RLHFDataset(str(written.files["train"]), worker.tokenizer, config.data)
    by_task = {dataset[i]["extra_info"]["task_id"]: dataset[i] for i in range(len(dataset))}
    batch = DataProto.from_single_dict(collate_fn([by_task["echo"], by_task["weighted"]]))
    batch.meta_info = {"global_steps": 1, "validate": False}
    out = await worker.generate_sequences(batch)  # hydra.utils.instantiate per rollout, then run

    assert entry["_target_"] == f"{AgentEnvAgentLoop.__module__}.{AgentEnvAgentLoop.__qualname__}"
    assert worker.hf_model_type == "qwen2"
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.25]
    assert out.meta_info["reward_extra_keys"] == [
        "score/answer-1",
        "score/answer-2",
        "attempts",
        "model_seconds",
        "env_seconds",
    ]
    assert out.non_tensor_batch["score/answer-1"].tolist() == [1.0, 1.0]
    assert out.non_tensor_batch["score/answer-2"].tolist() == [None, 0.0]
    assert out.non_tensor_batch["attempts"].tolist() == [1, 1]
