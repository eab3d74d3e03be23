"""NeMo Gym rows: a served bundle's tasks as NeMo Gym's JSONL (``agentenv nemo-gym write URL OUT``).

One row per task, in NeMo Gym's documented row model: ``responses_create_params`` (an OpenAI Responses API
request: ``input``, the task's system prompt and first prompt as messages, and ``tools``, the row's tools as
Responses function tools with their full JSON Schema), and the task's fields beside it (``id``, ``task_id``,
``split``, ``index``, ``toolset_key``, ``turns``, ``steps``, ``data_source``); ``agent_ref`` when an agent
name is given (NeMo Gym's data preparation adds it otherwise). The tasks and tools are read as the verl
writer reads them (``agentenv.client.taskapi.tasks_and_tools``: one probe per toolset). NeMo Gym itself needs
Python >= 3.13.14 and is not a dependency. Importing this module does not import verl.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agentenv.errors import AgentEnvError
from agentenv.files import locked, write_set

from ._progress import Bar

if TYPE_CHECKING:
    from agentenv.wire import TaskRow, Tool

__all__ = ["GymWritten", "nemo_gym_row", "nemo_gym_rows", "write_nemo_gym"]


@dataclass(frozen=True)
class GymWritten:
    """What ``write_nemo_gym`` wrote: each split's JSONL file and row count."""

    out: Path
    files: dict[str, Path]
    rows: dict[str, int]
    data_source: str


def nemo_gym_row(task: TaskRow, tools: list[Tool], data_source: str, agent_name: str | None = None) -> dict[str, Any]:
    """``task`` (offering ``tools``) as a NeMo Gym JSONL row."""
    row: dict[str, Any] = {
        "responses_create_params": {
            "input": task.messages(),
            # Responses API function tools: flat, not nested under "function" as in Chat Completions. strict is
            # false: a strict tool needs every property required and no additional ones, which few schemas are
            "tools": [_function_tool(t) for t in tools],
        },
    }
    if agent_name:
        row["agent_ref"] = {"type": "responses_api_agents", "name": agent_name}
    row.update(
        id=task.id,
        task_id=task.id,
        split=task.split,
        index=task.index,
        toolset_key=task.toolset_key,
        turns=task.turns,
        steps=list(task.steps),
        data_source=data_source,
    )
    return row


def _function_tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,
    }


def nemo_gym_rows(
    url: str,
    splits: Sequence[str] | None = None,
    *,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    agent_name: str | None = None,
    progress: TextIO | None = None,
) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """The data source and the NeMo Gym rows of ``splits`` (default: every split) on the server at ``url``, by split."""
    from agentenv.client import Shared, probe, tasks_and_tools

    shared = Shared(url, token_var=token_var, reset_timeout=reset_timeout)
    shared.token()  # an unset variable is refused now, naming it
    info = probe(shared)
    names = list(splits) if splits else list(info.splits)
    probing = Bar(progress, "probing toolsets", None)
    tasks, tools_by_key = tasks_and_tools(shared, names, progress=lambda key: probing.step())
    probing.close()
    data_source = f"agentenv/{info.name}"
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for task in tasks:
        rows[task.split].append(nemo_gym_row(task, tools_by_key[task.toolset_key], data_source, agent_name))
    return data_source, rows


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_nemo_gym(
    url: str,
    out: str | os.PathLike[str],
    *,
    splits: Sequence[str] | None = None,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    agent_name: str | None = None,
    progress: TextIO | None = None,
) -> GymWritten:
    """Write OUT/<split>.jsonl for each split (default: every split) as one set, ``manifest.json`` last
    (``agentenv.files.write_set``); a refusal or an error leaves OUT as it was."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise AgentEnvError(f"OUT {out} is a file; give a folder for the JSONL files")
    data_source, rows = nemo_gym_rows(
        url, splits, token_var=token_var, reset_timeout=reset_timeout, agent_name=agent_name, progress=progress
    )
    files = {f"{name}.jsonl": _jsonl(split_rows) for name, split_rows in rows.items()}
    with locked(out, "OUT"):
        write_set(out, files, about={"written_by": "agentenv-verl (nemo-gym)", "data_source": data_source})
    return GymWritten(
        out=out,
        files={name: out / f"{name}.jsonl" for name in rows},
        rows={name: len(split_rows) for name, split_rows in rows.items()},
        data_source=data_source,
    )
