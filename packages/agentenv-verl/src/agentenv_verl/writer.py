"""The dataset writer: a served bundle's tasks as verl datasets, and the loop config naming the loops.

``python -m agentenv_verl URL OUT`` and ``agentenv verl write URL OUT`` (``agentenv_verl.cli``) run
``write``: OUT/<split>.parquet (one row per task, an explicit Arrow schema; ``--single-turn`` writes the
single-turn rows of ``agentenv_verl.rows``) and OUT/agent_loop.yaml. Importing this module does not
import verl (nor transformers, which ``--tokenizer`` loads).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TextIO

import yaml
from agentenv.errors import AgentEnvError
from agentenv.files import locked, write_set
from agentenv.plugins import plugins

from ._progress import Bar
from .rows import single_turn_records, single_turn_schema

if TYPE_CHECKING:
    from agentenv.client import Shared
    from agentenv.wire import TaskRow

__all__ = ["AGENT_LOOP_FILE", "PromptLength", "PromptsTooLong", "Written", "arrow_schema", "count_prompt", "write"]

AGENT_LOOP_FILE: Final[str] = "agent_loop.yaml"


#: The columns of every written split. Explicit, so an empty split still has every column, and flat
#: in ``extra_info``: a row's tools are a JSON string, never nested dicts (Arrow would merge dict keys
#: across rows and fill the missing ones with nulls).
@functools.cache
def arrow_schema() -> Any:
    """The explicit Arrow schema of every split's parquet file (an empty split keeps every column).

    pyarrow is imported here, not with the module: the plugin loads this module for every
    ``agentenv`` command.
    """
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("prompt", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))),
            pa.field("agent_name", pa.string()),
            pa.field("data_source", pa.string()),
            pa.field(
                "reward_model", pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.string())])
            ),
            pa.field(
                "extra_info",
                pa.struct(
                    [
                        pa.field("split", pa.string()),
                        pa.field("index", pa.int64()),
                        pa.field("task_id", pa.string()),
                        pa.field("toolset_key", pa.string()),
                        pa.field("tools", pa.string()),
                        pa.field("steps", pa.list_(pa.string())),
                    ]
                ),
            ),
        ]
    )


_SHOWN = 5  # how many of the longest prompts a refusal lists


@dataclass(frozen=True)
class PromptLength:
    """A row's prompt length in tokens, with its tools, as the chat template renders it."""

    tokens: int
    split: str
    task_id: str

    def __str__(self) -> str:
        return f"{self.split}/{self.task_id}: {self.tokens} tokens"


@dataclass(frozen=True)
class Written:
    """What ``write`` wrote: each split's file and row count, the loop config, the longest prompts, and (single-turn
    rows) the multi-turn tasks left out, by split."""

    out: Path
    files: dict[str, Path]
    rows: dict[str, int]
    agent_loop_config: Path
    agent_name: str
    data_source: str
    longest: list[PromptLength] = field(default_factory=list)
    single_turn: bool = False
    left_out: dict[str, list[str]] = field(default_factory=dict)


class PromptsTooLong(AgentEnvError):
    """Rows over ``--max-prompt-length``; nothing was written."""

    def __init__(self, message: str, *, over: list[PromptLength]) -> None:
        self.over = list(over)
        super().__init__(message)


# ---------------------------------------------------------------------------------------------
# write
# ---------------------------------------------------------------------------------------------


def write(
    url: str,
    out: str | os.PathLike[str],
    *,
    splits: Sequence[str] | None = None,
    single_turn: bool = False,
    token_var: str | None = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    attempts: int = 3,
    tokenizer: Any = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    max_prompt_length: int | None = None,
    progress: TextIO | None = None,
    also: Callable[[Written], Mapping[str, str]] | None = None,
    source: Shared | None = None,
) -> Written:
    """Write the tasks of the server at ``url`` as verl datasets under ``out``; returns what was written.

    ``splits``: the splits to write (default: every split). ``single_turn``: write single-turn rows
    (``agentenv_verl.rows``: verl's standard fields, scored by the reward function; multi-turn tasks are
    left out and listed in ``Written.left_out``) instead of rows for ``AgentEnvAgentLoop``. ``token_var``:
    the variable holding the server's token (read now, and by the loops in every verl worker; written
    nowhere). ``tool_timeout``, ``reset_timeout``, ``attempts``: the loops' deadlines and replays, written
    to agent_loop.yaml (which registers both loops). ``tokenizer`` (a name, a path or a tokenizer) counts
    each prompt with its tools as the chat template renders it, with ``chat_template_kwargs`` (verl's
    ``data.apply_chat_template_kwargs``); ``max_prompt_length`` refuses rows over it before anything is
    written. ``progress``: where the progress bar goes (None: nowhere). ``also``: more files of the set
    (name -> text), made from what is written (``agentenv verl dapo`` adds its reward module and config).
    ``source``: where the tasks are read when not from ``url`` (a loopback server of the bundle, while the loops are
    written to reach ``url``).

    Everything that can be refused without the server is refused before it is read. ``out`` is held by
    this process while it is written (``agentenv.files.locked``), and the files are written as one set
    (``agentenv.files.write_set``): each file whole, ``manifest.json`` last, listing them. A refusal or an
    error leaves ``out`` as it was; a killed writer leaves each file whole, old or new.
    """
    out = Path(out)
    _check_options(out, attempts, tool_timeout, reset_timeout, tokenizer, max_prompt_length)
    from agentenv.client import (
        Shared,
        probe,  # the session layer loads pydantic: not at import
    )

    shared = Shared(url, token_var=token_var, tool_timeout=tool_timeout, reset_timeout=reset_timeout)
    shared.token()  # an unset variable is refused now, naming it
    loops = _loop_entries(shared.url, token_var, tool_timeout, reset_timeout, attempts)
    tok = _load_tokenizer(tokenizer) if tokenizer is not None else None

    reading = source or shared
    info = probe(reading)
    names = list(splits) if splits else list(info.splits)
    data_source = f"agentenv/{info.name}"
    read = _single_turn_rows if single_turn else _agent_loop_rows
    records, prompts, left_out = read(reading, info, names, loops[0]["name"], data_source, progress)
    kwargs = dict(chat_template_kwargs or {})
    longest = _count_prompts(tok, prompts, kwargs, max_prompt_length, progress) if tok is not None else []
    written = Written(
        out=out,
        files={name: out / f"{name}.parquet" for name in names},
        rows={name: len(split_records) for name, split_records in records.items()},
        agent_loop_config=out / AGENT_LOOP_FILE,
        agent_name=loops[1 if single_turn else 0]["name"],
        data_source=data_source,
        longest=longest,
        single_turn=single_turn,
        left_out=left_out,
    )
    schema = single_turn_schema() if single_turn else arrow_schema()
    files: dict[str, Any] = {f"{name}.parquet": _parquet(split, schema) for name, split in records.items()}
    files[AGENT_LOOP_FILE] = _loop_yaml(loops, out)
    files.update(also(written) if also is not None else {})
    writing = Bar(progress, "writing", len(files))
    about = {"written_by": "agentenv-verl", "data_source": data_source}
    try:
        with locked(out, "OUT"):
            write_set(out, files, about=about, progress=lambda name: writing.step())
    finally:
        writing.close()
    return written


Prompt = tuple[str, str, list[dict[str, str]], list[dict[str, Any]] | None]  # split, task id, messages, tools
Rows = tuple[dict[str, list[dict[str, Any]]], list[Prompt], dict[str, list[str]]]  # records, prompts, left out


def _single_turn_rows(
    shared: Shared, info: Any, names: list[str], agent_name: str, data_source: str, progress: TextIO | None
) -> Rows:
    from agentenv.client import iter_tasks

    records: dict[str, list[dict[str, Any]]] = {}
    left_out: dict[str, list[str]] = {}
    for name in names:
        records[name], left = single_turn_records(iter_tasks(shared, name, info=info), info.name)
        if left:
            left_out[name] = left
    if not any(records.values()):
        raise AgentEnvError(
            f"{shared.url} has no single-turn task in {', '.join(names) or 'any split'}: every task has more than "
            "one turn. Write them for AgentEnvAgentLoop instead (without --single-turn)"
        )
    prompts: list[Prompt] = [
        (r["extra_info"]["split"], r["extra_info"]["task_id"], r["prompt"], None) for rs in records.values() for r in rs
    ]
    return records, prompts, left_out


def _agent_loop_rows(
    shared: Shared, info: Any, names: list[str], agent_name: str, data_source: str, progress: TextIO | None
) -> Rows:
    from agentenv.client import tasks_and_tools

    probing = Bar(progress, "probing toolsets", None)
    rows, tools_by_key = tasks_and_tools(shared, names, progress=lambda key: probing.step())
    probing.close()
    steps = _all_steps(shared, rows, [s for s in info.splits if s not in names])
    tools_json = {
        k: json.dumps([t.as_openai() for t in tools], ensure_ascii=False) for k, tools in tools_by_key.items()
    }
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    prompts: list[Prompt] = []
    for row in rows:
        records[row.split].append(_record(row, agent_name, data_source, tools_json[row.toolset_key], steps))
        prompts.append((row.split, row.id, row.messages(), [t.as_openai() for t in tools_by_key[row.toolset_key]]))
    return records, prompts, {}


def _parquet(records: list[dict[str, Any]], schema: Any) -> Callable[[BinaryIO], None]:
    def write_to(file: BinaryIO) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records, schema=schema), file)

    return write_to


def _count_prompts(
    tok: Any,
    prompts: list[Prompt],
    kwargs: dict[str, Any],
    max_prompt_length: int | None,
    progress: TextIO | None,
) -> list[PromptLength]:
    """Each prompt's length with its tools, longest first; refuses prompts over ``max_prompt_length``."""
    counting = Bar(progress, "counting prompt tokens", len(prompts))
    longest: list[PromptLength] = []
    for split, task_id, messages, tools in prompts:
        longest.append(PromptLength(count_prompt(tok, messages, tools, kwargs), split, task_id))
        counting.step()
    counting.close()
    longest.sort(key=lambda p: (-p.tokens, p.split, p.task_id))
    over = [p for p in longest if max_prompt_length is not None and p.tokens > max_prompt_length]
    if over:
        shown = "\n".join(f"  {p}" for p in over[:_SHOWN]) + (
            f"\n  ... and {len(over) - _SHOWN} more" if len(over) > _SHOWN else ""
        )
        raise PromptsTooLong(
            f"{len(over)} of {len(prompts)} prompts (with their tools) are over --max-prompt-length "
            f"{max_prompt_length}; nothing was written:\n{shown}\nverl would cut such a prompt from the left, "
            "losing the system prompt and the tools (its overlong filter does not count a row's tools). Set "
            f"data.max_prompt_length (and --max-prompt-length) to at least {over[0].tokens}, or shorten those "
            "prompts",
            over=over,
        )
    return longest


def count_prompt(
    tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any]
) -> int:
    """Tokens of ``messages`` with ``tools`` (None: no tools) as verl's agent loop renders its first prompt."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
    )
    if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    if len(ids) == 1 and isinstance(ids[0], list | tuple):  # transformers 5 may batch a single conversation
        ids = ids[0]
    return len(ids)


def _check_options(
    out: Path, attempts: int, tool_timeout: float, reset_timeout: float, tokenizer: Any, max_prompt_length: int | None
) -> None:
    if out.exists() and not out.is_dir():
        raise AgentEnvError(f"OUT {out} is a file; give a folder for the datasets")
    if not isinstance(attempts, int) or attempts < 1:
        raise AgentEnvError(f"--attempts {attempts!r}: give 1 or more (1 plays each rollout once, without replays)")
    for flag, value in (("--tool-timeout", tool_timeout), ("--reset-timeout", reset_timeout)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise AgentEnvError(f"{flag} {value!r}: give a positive number of seconds")
    if max_prompt_length is not None:
        if not isinstance(max_prompt_length, int) or max_prompt_length < 1:
            raise AgentEnvError(f"--max-prompt-length {max_prompt_length!r}: give a positive number of tokens")
        if tokenizer is None:
            raise AgentEnvError(
                "--max-prompt-length needs --tokenizer MODEL_OR_PATH (the policy's tokenizer) to count prompt tokens"
            )


def _loop_entries(
    url: str, token_var: str | None, tool_timeout: float, reset_timeout: float, attempts: int
) -> list[dict[str, Any]]:
    """agent_loop.yaml's entries: both loops, named and found by this package's Integration record."""
    offers = plugins().integration("verl").offers
    wanted = ("agent_loop", "agent_loop_name", "single_turn_loop", "single_turn_loop_name")
    if not all(key in offers for key in wanted):
        raise AgentEnvError(
            "the installed 'verl' integration offers no agent loops; reinstall it (pip install agentenv-verl)"
        )

    def target(path: str) -> str:
        module, _, attr = path.partition(":")
        return f"{module}.{attr}"

    common = {"url": url, "reset_timeout": float(reset_timeout), "attempts": int(attempts), "token_var": token_var}
    return [
        {
            "name": offers["agent_loop_name"],
            "_target_": target(offers["agent_loop"]),
            **common,
            "tool_timeout": float(tool_timeout),
        },
        {"name": offers["single_turn_loop_name"], "_target_": target(offers["single_turn_loop"]), **common},
    ]


def _load_tokenizer(tokenizer: Any) -> Any:
    if not isinstance(tokenizer, str | os.PathLike):
        return tokenizer
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise AgentEnvError("--tokenizer needs transformers: pip install 'agentenv-verl[tokenizer]'") from None
    try:
        return AutoTokenizer.from_pretrained(str(tokenizer))
    except Exception as exc:
        raise AgentEnvError(
            f"--tokenizer {tokenizer}: cannot load it ({type(exc).__name__}: {exc}); give the policy's model name or "
            "the folder its tokenizer was saved to"
        ) from None


def _all_steps(shared: Shared, rows: list[TaskRow], other_splits: list[str]) -> list[str]:
    """Every step id of the bundle, in first-seen order: the score keys every rollout reports."""
    from agentenv.client import read_tasks

    everything = rows + [row for split in other_splits for row in read_tasks(shared, split)]
    return list(dict.fromkeys(step for row in everything for step in row.steps))


def _record(row: TaskRow, agent_name: str, data_source: str, tools_json: str, steps: list[str]) -> dict[str, Any]:
    return {
        "prompt": row.messages(),
        "agent_name": agent_name,
        "data_source": data_source,
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {
            "split": row.split,
            "index": row.index,
            "task_id": row.id,
            "toolset_key": row.toolset_key,
            "tools": tools_json,
            "steps": steps,
        },
    }


def _loop_yaml(entries: list[dict[str, Any]], out: Path) -> str:
    header = (
        "# Written by agentenv-verl. Point verl at it:\n"
        f"#   actor_rollout_ref.rollout.agent.agent_loop_config_path={(out / AGENT_LOOP_FILE).resolve()}\n"
        f"# Rows with agent_name: {entries[0]['name']} play in AgentEnvAgentLoop. Single-turn rows (--single-turn)\n"
        f"# name no loop: actor_rollout_ref.rollout.agent.default_agent_loop={entries[1]['name']} scores them in\n"
        "# the single-turn loop. token_var names the variable that holds the server's token in every verl\n"
        "# worker; the token itself is in no file.\n"
    )
    return header + yaml.safe_dump(entries, sort_keys=False)
