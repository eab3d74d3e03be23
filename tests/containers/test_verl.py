"""verl's own agent loop (AgentEnvAgentLoop over verl's ToolAgentLoop) plays a two-turn task on a container env,
the model a scripted stand-in for verl's rollout server, the rows written by agentenv's writer from the server."""

from __future__ import annotations

import os
import tempfile
from typing import Any

# Before verl, transformers and datasets are imported: no hub, and datasets' cache out of $HOME.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(tempfile.gettempdir(), "agentenv-verl-tests-datasets"))

import pytest
from agentenv_verl import write

from tests.support import ServeProcess
from tests.support.containers import wait_until_none
from tests.support.verl import ScriptedServer, build_tokenizer, dataset_rows, make_loop, tool_call

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


@pytest.fixture(scope="module")
def rows(box_server: ServeProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The tokenizer built here and the box bundle's train rows, as verl's worker hands them to ``run``."""
    tokenizer = build_tokenizer()
    written = write(box_server.url, tmp_path_factory.mktemp("box-dataset"))
    return tokenizer, dataset_rows(written.files["train"], tokenizer, tmp_path_factory.mktemp("rlhf-cache"))


async def test_a_two_turn_container_task_is_scored_through_verls_agent_loop(
    box_server: ServeProcess, rows: tuple[Any, dict[str, Any]]
) -> None:
    tokenizer, by_task = rows
    code, city = tool_call("read_note", key="code"), tool_call("read_note", key="city")
    model = ScriptedServer(tokenizer, [code, "4217<|im_end|>", city, "Lisbon<|im_end|>"])

    out = await make_loop(tokenizer, model, box_server.url).run(SAMPLING, **by_task["notes-1"])

    assert out.reward_score == 1.0
    info = out.extra_fields["reward_extra_info"]
    assert (info["score/code"], info["score/city"], info["attempts"]) == (1.0, 1.0, 1)
    assert "<tool_response>\n4217\n</tool_response>" in model.prompts[1]  # the container's answer, in the context
    assert "<tool_response>\nLisbon\n</tool_response>" in model.prompts[3]
    assert box_server.proc is not None and wait_until_none(box_server.proc.pid) == {}
