"""Single-turn rows (``verl_rows``, ``python -m agentenv_verl URL OUT --single-turn``) read back by verl's own
RLHFDataset, and scored by the reward function by the fields verl hands it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from agentenv_verl import verl_rows, write
from agentenv_verl.cli import main
from agentenv_verl.reward import compute_score
from agentenv_verl.rows import single_turn_schema
from omegaconf import OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from tests.support.verl import ARITH, FAKE


def test_verl_rows_are_the_single_turn_tasks_with_verls_standard_fields(serve):
    server = serve(FAKE)

    rows = {row["extra_info"]["task_id"]: row for row in verl_rows(server.url, "train")}

    assert "two-turn" not in rows and "weighted" not in rows  # multi-turn: AgentEnvAgentLoop's
    assert rows["bash"] == {
        "data_source": "agentenv/fake",
        "prompt": [
            {"role": "system", "content": "You are a test agent. Use the tools as asked."},
            {"role": "user", "content": "Print 'hi' with bash, then say it."},
        ],
        "ability": "fake",
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {"split": "train", "index": rows["bash"]["extra_info"]["index"], "task_id": "bash"},
    }


def test_the_written_rows_are_read_back_by_verls_dataset_and_scored_by_their_fields(serve, tokenizer, tmp_path):
    server = serve(ARITH)

    assert main([server.url, str(tmp_path / "out"), "--single-turn", "--quiet"]) == 0

    table = pq.read_table(tmp_path / "out" / "train.parquet")
    assert table.schema.equals(single_turn_schema())
    assert "agent_name" not in table.column_names  # verl's default agent loop plays them
    config = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts": False})
    dataset = RLHFDataset(str(tmp_path / "out" / "train.parquet"), tokenizer, config)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    assert len(dataset) == table.num_rows > 0
    first = {key: batch[key][0] for key in ("data_source", "raw_prompt", "reward_model", "extra_info")}
    assert first["data_source"] == "agentenv/arith"
    assert [m["role"] for m in first["raw_prompt"]] == ["system", "user"]
    assert first["reward_model"]["ground_truth"] == ""  # the verifiers stay on the server
    task = first["extra_info"]["task_id"]

    # as verl's reward manager calls the reward function: the row's fields, numpy values and all
    scored = compute_score(first["data_source"], "-1", first["reward_model"]["ground_truth"], first["extra_info"],
                           url=server.url)  # fmt: skip
    assert task.startswith("one-") and scored["score"] == 0.0


def test_an_empty_split_keeps_every_column_and_multi_turn_tasks_are_listed(serve, tmp_path):
    server = serve(FAKE)

    written = write(server.url, tmp_path / "out", single_turn=True)

    assert written.left_out == {"train": ["two-turn", "weighted"]}
    assert written.rows["test"] == 0
    empty = pq.read_table(tmp_path / "out" / "test.parquet")
    assert empty.schema.equals(single_turn_schema()) and empty.num_rows == 0
    assert pa.Table.from_pylist(verl_rows(server.url, "eval"), schema=single_turn_schema()).num_rows == 1
