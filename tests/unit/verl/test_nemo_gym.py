"""``agentenv nemo-gym write URL OUT`` against the real server on the fake bundle: NeMo Gym's JSONL rows.

NeMo Gym (Python >= 3.13.14) is not installed here. Its row model, as documented and as its code reads it
(nemo_gym/openai_utils.py, base_resources_server.py): each line has ``responses_create_params``, a copy of
OpenAI's ``ResponseCreateParamsNonStreaming`` with no extra keys (``input`` messages, ``tools`` as Responses
function tools), optionally ``agent_ref`` ``{type: responses_api_agents, name}``, and any task fields beside
them. The rows are checked against OpenAI's own types for those parts (the openai package, which NeMo Gym's
types copy, comes with OpenEnv).
"""

from __future__ import annotations

import json
import typing

from agentenv.cli import main as agentenv_main
from agentenv.client.settings import Shared
from agentenv.client.taskapi import read_tasks
from agentenv_verl.nemo_gym import write_nemo_gym
from openai.types.responses import EasyInputMessageParam, FunctionToolParam
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

REQUEST_KEYS = set(typing.get_type_hints(ResponseCreateParamsNonStreaming))


def check_row(row: dict) -> None:
    """Refuse a row NeMo Gym would refuse (its request model forbids unknown keys; pydantic checks the rest)."""
    request = row["responses_create_params"]
    assert set(request) <= REQUEST_KEYS, set(request) - REQUEST_KEYS
    TypeAdapter(list[EasyInputMessageParam]).validate_python(request["input"])
    TypeAdapter(list[FunctionToolParam]).validate_python(request["tools"])
    if "agent_ref" in row:
        assert row["agent_ref"]["type"] == "responses_api_agents" and row["agent_ref"]["name"]


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_each_task_is_a_row_in_nemo_gyms_row_model(serve, tmp_path):
    server = serve()

    written = write_nemo_gym(server.url, tmp_path / "out", agent_name="agentenv_fake_agent")

    assert written.rows == {"train": 11, "eval": 1, "test": 0}
    rows = {row["task_id"]: row for row in read(written.files["train"])}
    assert set(rows) == {t.id for t in read_tasks(Shared(server.url), "train")}
    for row in rows.values():
        check_row(row)
    echo = rows["echo"]
    assert echo["responses_create_params"]["input"] == [
        {"role": "system", "content": "You are a test agent. Use the tools as asked."},
        {"role": "user", "content": "Echo the word 'ping' with the echo tool, then say it."},
    ]
    assert echo["agent_ref"] == {"type": "responses_api_agents", "name": "agentenv_fake_agent"}
    assert {k: echo[k] for k in ("id", "split", "turns", "steps", "data_source")} == {
        "id": "echo", "split": "train", "turns": 1, "steps": ["answer-1"], "data_source": "agentenv/fake"}  # fmt: skip
    assert rows["two-turn"]["turns"] == 2 and rows["two-turn"]["steps"] == ["answer-1", "answer-2"]


def test_a_rows_tools_are_its_toolsets_with_their_full_schemas(serve, tmp_path):
    server = serve()

    written = write_nemo_gym(server.url, tmp_path / "out", splits=["train"])

    rows = {row["task_id"]: row for row in read(written.files["train"])}
    tools = {t["name"]: t for t in rows["echo"]["responses_create_params"]["tools"]}
    assert "add" not in {t["name"] for t in rows["no-add"]["responses_create_params"]["tools"]}
    assert tools["echo"] == {
        "type": "function",
        "name": "echo",
        "description": "Echo the text back.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "What to echo."}},
                       "required": ["text"], "additionalProperties": False},
        "strict": False,
    }  # fmt: skip
    assert tools["nested"]["parameters"]["properties"]["filter"]["properties"]["tags"]["items"]["enum"] == [
        "work",
        "home",
    ]
    assert "agent_ref" not in rows["echo"]  # NeMo Gym's data preparation adds it


def test_tools_are_probed_once_per_toolset_as_the_verl_writer_does(serve, ledger, tmp_path):
    server = serve()

    write_nemo_gym(server.url, tmp_path / "out")

    keys = {t.toolset_key for split in ("train", "eval", "test") for t in read_tasks(Shared(server.url), split)}
    assert ledger.wait_for("teardown", len(keys)) == len(keys)
    assert ledger.count("deploy") == len(keys)


def test_agentenv_nemo_gym_write_prints_what_it_wrote(serve, tmp_path, capsys):
    server = serve()

    assert agentenv_main(["nemo-gym", "write", server.url, str(tmp_path / "out"), "--split", "eval", "--quiet"]) == 0

    assert f"wrote {tmp_path / 'out' / 'eval.jsonl'} (1 row, data_source agentenv/fake)" in capsys.readouterr().out
    (row,) = read(tmp_path / "out" / "eval.jsonl")
    check_row(row)
