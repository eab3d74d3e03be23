"""The dataset writer: a served bundle's tasks as verl datasets, and the loop config naming the loop.

``python -m agentenv_verl URL OUT`` and ``agentenv verl write URL OUT`` run ``write``: OUT/<split>.parquet
(one row per task, an explicit Arrow schema) and OUT/agent_loop.yaml. Importing this module does not
import verl (nor transformers, which ``--tokenizer`` loads).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import yaml
from agentenv.errors import AgentEnvError
from agentenv.plugins import plugins

if TYPE_CHECKING:
    from agentenv.settings import Shared
    from agentenv.wire import TaskRow

__all__ = [
    "AGENT_LOOP_FILE",
    "PromptLength",
    "PromptsTooLong",
    "Written",
    "arrow_schema",
    "configure_cli",
    "configure_write",
    "main",
    "run_cli",
    "run_write",
    "write",
]

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
    """What ``write`` wrote: each split's file and row count, the loop config, and the longest prompts."""

    out: Path
    files: dict[str, Path]
    rows: dict[str, int]
    agent_loop_config: Path
    agent_name: str
    data_source: str
    longest: list[PromptLength] = field(default_factory=list)


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
    token_var: str | None = None,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    attempts: int = 3,
    tokenizer: Any = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    max_prompt_length: int | None = None,
    progress: TextIO | None = None,
) -> Written:
    """Write the tasks of the server at ``url`` as verl datasets under ``out``; returns what was written.

    ``splits``: the splits to write (default: every split). ``token_var``: the variable holding the
    server's token (read now, and by the loop in every verl worker; written nowhere). ``tool_timeout``,
    ``reset_timeout``, ``attempts``: the loop's deadlines and replays, written to agent_loop.yaml.
    ``tokenizer`` (a name, a path or a tokenizer) counts each prompt with its tools as the chat template
    renders it, with ``chat_template_kwargs`` (verl's ``data.apply_chat_template_kwargs``);
    ``max_prompt_length`` refuses rows over it before anything is written. ``progress``: where the
    progress bar goes (None: nowhere).

    Everything that can be refused without the server is refused before it is read; the files are
    written to a temporary folder and moved into place, so a refusal or an error leaves ``out`` as it was.
    """
    out = Path(out)
    kwargs = dict(chat_template_kwargs or {})
    _check_options(out, attempts, tool_timeout, reset_timeout, tokenizer, max_prompt_length)
    from agentenv.settings import Shared
    from agentenv.taskapi import probe, tasks_and_tools  # the session layer loads pydantic: not at import

    shared = Shared(url, token_var=token_var, tool_timeout=tool_timeout, reset_timeout=reset_timeout)
    shared.token()  # an unset variable is refused now, naming it
    agent_name, target = _loop_registration()
    tok = _load_tokenizer(tokenizer) if tokenizer is not None else None

    info = probe(shared)
    names = list(splits) if splits else list(info.splits)
    probing = _Bar(progress, "probing toolsets", None)
    rows, tools_by_key = tasks_and_tools(shared, names, progress=lambda key: probing.step())
    probing.close()
    steps = _all_steps(shared, rows, [s for s in info.splits if s not in names])
    data_source = f"agentenv/{info.name}"
    tools_json = {
        k: json.dumps([t.as_openai() for t in tools], ensure_ascii=False) for k, tools in tools_by_key.items()
    }

    longest: list[PromptLength] = []
    if tok is not None:
        counting = _Bar(progress, "counting prompt tokens", len(rows))
        for row in rows:
            tools = [t.as_openai() for t in tools_by_key[row.toolset_key]]
            longest.append(PromptLength(count_prompt(tok, row.messages(), tools, kwargs), row.split, row.id))
            counting.step()
        counting.close()
        longest.sort(key=lambda p: (-p.tokens, p.split, p.task_id))
        over = [p for p in longest if max_prompt_length is not None and p.tokens > max_prompt_length]
        if over:
            shown = "\n".join(f"  {p}" for p in over[:_SHOWN]) + (
                f"\n  ... and {len(over) - _SHOWN} more" if len(over) > _SHOWN else ""
            )
            raise PromptsTooLong(
                f"{len(over)} of {len(rows)} prompts (with their tools) are over --max-prompt-length "
                f"{max_prompt_length}; nothing was written:\n{shown}\nverl would cut such a prompt from the left, "
                "losing the system prompt and the tools (its overlong filter does not count a row's tools). Set "
                f"data.max_prompt_length (and --max-prompt-length) to at least {over[0].tokens}, or shorten those "
                "prompts",
                over=over,
            )

    config = {
        "name": agent_name,
        "_target_": target,
        "url": shared.url,
        "tool_timeout": float(tool_timeout),
        "reset_timeout": float(reset_timeout),
        "attempts": int(attempts),
        "token_var": token_var,
    }
    by_split: dict[str, list[TaskRow]] = {name: [] for name in names}
    for row in rows:
        by_split[row.split].append(row)
    writing = _Bar(progress, "writing", len(names) + 1)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".agentenv-verl-", dir=out))
    try:
        for name, split_rows in by_split.items():
            records = [_record(row, agent_name, data_source, tools_json[row.toolset_key], steps) for row in split_rows]
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema()), staging / f"{name}.parquet")
            writing.step()
        (staging / AGENT_LOOP_FILE).write_text(_loop_yaml(config, out), encoding="utf-8")
        writing.step()
        for name in [*(f"{n}.parquet" for n in names), AGENT_LOOP_FILE]:
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        writing.close()
    return Written(
        out=out,
        files={name: out / f"{name}.parquet" for name in names},
        rows={name: len(split_rows) for name, split_rows in by_split.items()},
        agent_loop_config=out / AGENT_LOOP_FILE,
        agent_name=agent_name,
        data_source=data_source,
        longest=longest,
    )


def count_prompt(
    tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]], kwargs: Mapping[str, Any]
) -> int:
    """Tokens of ``messages`` with ``tools`` as verl's agent loop renders its first prompt."""
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


def _loop_registration() -> tuple[str, str]:
    """The loop's registered name and hydra ``_target_``, from this package's Integration record."""
    offers = plugins().integration("verl").offers
    if "agent_loop" not in offers or "agent_loop_name" not in offers:
        raise AgentEnvError(
            "the installed 'verl' integration offers no agent loop; reinstall agentenv-verl (pip install agentenv-verl)"
        )
    module, _, attr = offers["agent_loop"].partition(":")
    return offers["agent_loop_name"], f"{module}.{attr}"


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
    from agentenv.taskapi import read_tasks

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


def _loop_yaml(config: dict[str, Any], out: Path) -> str:
    header = (
        "# Written by agentenv-verl. Point verl at it:\n"
        f"#   actor_rollout_ref.rollout.agent.agent_loop_config_path={(out / AGENT_LOOP_FILE).resolve()}\n"
        "# The rows' agent_name column selects this loop. token_var names the variable that holds the\n"
        "# server's token in every verl worker; the token itself is in no file.\n"
    )
    return header + yaml.safe_dump([config], sort_keys=False)


class _Bar:
    """A plain-text progress bar on a stream (a counter when the total is unknown)."""

    def __init__(self, stream: TextIO | None, label: str, total: int | None) -> None:
        self.stream, self.label, self.total, self.done = stream, label, total, 0
        self._draw()

    def step(self) -> None:
        self.done += 1
        self._draw()

    def _draw(self) -> None:
        if self.stream is None:
            return
        if self.total:
            filled = round(20 * self.done / self.total)
            text = f"{self.label} [{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total}"
        else:
            text = f"{self.label}: {self.done}"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()
            self.stream = None


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------


def configure_write(parser: argparse.ArgumentParser) -> None:
    """Add the writer's arguments to ``parser``."""
    add = parser.add_argument
    add("url", metavar="URL", help="the agentenv server (http://host:port)")
    add("out", metavar="OUT", type=Path, help="folder for <split>.parquet and agent_loop.yaml")
    add(
        "--split",
        dest="splits",
        action="append",
        metavar="NAME",
        help="write only this split (repeatable; default: every split)",
    )
    add(
        "--token-var",
        metavar="NAME",
        help="the environment variable holding the server's token (read here and in every verl worker)",
    )
    add("--tool-timeout", type=float, default=60.0, metavar="S", help="seconds a tool call may take (default: 60)")
    add(
        "--reset-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a deploy or an end of turn may take; also how long after its start a rollout may "
        "begin a replay (default: 300)",
    )
    add(
        "--attempts",
        type=int,
        default=3,
        metavar="N",
        help="plays of a rollout the env fails before it is given up as failed (default: 3)",
    )
    add(
        "--tokenizer",
        metavar="MODEL_OR_PATH",
        help="the policy's tokenizer: count each prompt with its tools as its chat template renders it",
    )
    add(
        "--chat-template-kwargs",
        metavar="JSON",
        default=None,
        help="as verl's data.apply_chat_template_kwargs, e.g. '{\"enable_thinking\": false}'",
    )
    add(
        "--max-prompt-length",
        type=int,
        metavar="N",
        help="refuse rows over N tokens (verl's data.max_prompt_length); needs --tokenizer",
    )
    add("--quiet", action="store_true", help="no progress bar")


def run_write(args: argparse.Namespace) -> int:
    """Run the writer from parsed arguments; prints what it wrote. Returns the exit code."""
    kwargs = _template_kwargs(args.chat_template_kwargs)
    written = write(
        args.url,
        args.out,
        splits=args.splits,
        token_var=args.token_var,
        tool_timeout=args.tool_timeout,
        reset_timeout=args.reset_timeout,
        attempts=args.attempts,
        tokenizer=args.tokenizer,
        chat_template_kwargs=kwargs,
        max_prompt_length=args.max_prompt_length,
        progress=None if args.quiet else sys.stderr,
    )
    for split, path in written.files.items():
        count = written.rows[split]
        print(f"wrote {path} ({count} row{'s' if count != 1 else ''}, data_source {written.data_source})")
    print(f"wrote {written.agent_loop_config} (loop {written.agent_name!r})")
    if written.longest:
        print(f"longest prompt with its tools: {written.longest[0]}")
    else:
        print("prompt lengths not counted: pass --tokenizer MODEL_OR_PATH to count them")
    print("verl settings:")
    print(f"  actor_rollout_ref.rollout.agent.agent_loop_config_path={written.agent_loop_config.resolve()}")
    train = written.files.get("train")
    if train is not None:
        print(f"  data.train_files={train.resolve()}")
    for split in ("eval", "validation", "test"):
        if written.rows.get(split):
            print(f"  data.val_files={written.files[split].resolve()}")
            break
    if written.longest:
        print(f"  data.max_prompt_length={written.longest[0].tokens}  (at least)")
    for key, value in kwargs.items():  # one override per key: hydra refuses new keys in verl's empty dict
        print(f"  +data.apply_chat_template_kwargs.{key}={json.dumps(value)}")
    return 0


def _template_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AgentEnvError(
            f"--chat-template-kwargs is not JSON ({exc.msg}); write an object, e.g. '{{\"enable_thinking\": false}}'"
        ) from None
    if not isinstance(value, dict):
        raise AgentEnvError(
            f"--chat-template-kwargs is a JSON {type(value).__name__}; write an object, "
            "e.g. '{\"enable_thinking\": false}'"
        )
    return value


def configure_cli(parser: argparse.ArgumentParser) -> None:
    """``agentenv verl``: its subcommands."""
    sub = parser.add_subparsers(dest="verl_command", metavar="COMMAND")
    configure_write(
        sub.add_parser(
            "write", help="write a served bundle's tasks as verl datasets", description=(__doc__ or "").split("\n\n")[0]
        )
    )


def run_cli(args: argparse.Namespace) -> int:
    """Run ``agentenv verl COMMAND``."""
    if args.verl_command != "write":
        print("usage: agentenv verl write URL OUT [options] (see agentenv verl write --help)", file=sys.stderr)
        return 2
    return run_write(args)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentenv_verl URL OUT``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agentenv_verl", description=(__doc__ or "").split("\n\n")[0])
    configure_write(parser)
    args = parser.parse_args(argv)
    try:
        return run_write(args)
    except AgentEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
