"""``agentenv export DIR --format atif|jsonl|parquet``: records as ATIF trajectories, or as rows for SFT and RL.

ATIF (the Agent Trajectory Interchange Format, v1.7, Harbor's): one trajectory per episode, a system step, then per
turn the user's prompt, an agent step per tool call (the call and its answer as the step's observation) and an agent
step with the reply; the reward, step scores, outcome and failure go in the trajectory's ``extra``. Rows: the
episode as chat ``messages`` (OpenAI's form, what TRL's SFT and chat templates read), ``reward``, ``step_rewards``,
``has_verdict`` (scored: trainable on its reward) and where it came from.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from agentenv.errors import AgentEnvError
from agentenv.files import write_file, write_set
from agentenv.record.reader import read

__all__ = ["ATIF_VERSION", "FORMATS", "atif_trajectory", "configure", "export", "row", "run"]

ATIF_VERSION: Final = "ATIF-v1.7"
FORMATS: Final = ("atif", "jsonl", "parquet")
HELP: Final = "records (agentenv serve --record) as ATIF trajectories, or JSONL/parquet rows for SFT and RL"


def atif_trajectory(record: dict[str, Any]) -> dict[str, Any]:
    """One record as an ATIF v1.7 trajectory (a JSON-ready dict)."""
    from agentenv import __version__

    steps: list[dict[str, Any]] = []

    def step(source: str, message: str, **fields: Any) -> None:
        steps.append({"step_id": len(steps) + 1, "source": source, "message": message, **fields})

    if record.get("system"):
        step("system", str(record["system"]))
    calls = 0
    for turn in record.get("turns") or []:
        step("user", str(turn.get("prompt", "")))
        for call in turn.get("calls") or []:
            calls += 1
            call_id = f"call-{calls}"
            result: dict[str, Any] = {"source_call_id": call_id, "content": str(call.get("answer", ""))}
            if call.get("error"):
                result["extra"] = {"error": True}  # the policy's mistake, answered to it
            step(
                "agent",
                "",
                tool_calls=[
                    {
                        "tool_call_id": call_id,
                        "function_name": str(call.get("tool", "")),
                        "arguments": _arguments(call.get("args")),
                    }
                ],
                observation={"results": [result]},
                extra={"seconds": call.get("seconds")},
            )
        if turn.get("reply") is not None:
            step("agent", str(turn["reply"]))
    if not steps:
        step("system", "")
    extra = {
        k: record.get(k)
        for k in (
            "task",
            "split",
            "outcome",
            "reward",
            "steps",
            "failure",
            "attempt",
            "earlier",
            "client",
            "step",
            "bundle",
        )
    }
    return {
        "schema_version": ATIF_VERSION,
        "session_id": str(record.get("rollout") or record.get("id")),
        "trajectory_id": str(record.get("id")),
        "agent": {"name": str(record.get("client") or "agentenv"), "version": __version__},
        "steps": steps,
        "extra": extra,
    }


def row(record: dict[str, Any]) -> dict[str, Any]:
    """One record as a training row: ``messages``, ``reward``, ``step_rewards``, ``has_verdict`` and its origin."""
    messages: list[dict[str, Any]] = []
    if record.get("system"):
        messages.append({"role": "system", "content": str(record["system"])})
    calls = 0
    for turn in record.get("turns") or []:
        messages.append({"role": "user", "content": str(turn.get("prompt", ""))})
        for call in turn.get("calls") or []:
            calls += 1
            call_id = f"call-{calls}"
            function = {"name": str(call.get("tool", "")), "arguments": str(call.get("args") or "{}")}
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": str(call.get("answer", ""))})
        if turn.get("reply") is not None:
            messages.append({"role": "assistant", "content": str(turn["reply"])})
    steps = record.get("steps") or []
    return {
        "id": record.get("id"),
        "task": record.get("task"),
        "split": record.get("split"),
        "messages": messages,
        "reward": record.get("reward"),
        "step_rewards": [{"id": str(s.get("id")), "score": s.get("score")} for s in steps],
        "has_verdict": record.get("outcome") == "scored",
        "outcome": record.get("outcome"),
        "attempt": record.get("attempt"),
    }


def export(records: Iterable[dict[str, Any]], out: str | Path, fmt: str) -> int:
    """Write ``records`` to ``out`` as ``fmt`` (a folder of ``000001.json``... trajectories and a manifest for ``atif``,
    one file for ``jsonl`` and ``parquet``), whole or not at all; returns how many were written."""
    records = list(records)
    target = Path(out)
    if fmt == "atif":
        # numbered, not named by episode id: a client chooses its episode ids, and a file name must be ours
        files = {
            f"{n:06d}.json": json.dumps(atif_trajectory(r), ensure_ascii=False, indent=1)
            for n, r in enumerate(records, 1)
        }
        write_set(target, files, about={"format": ATIF_VERSION, "trajectories": len(files)})
    elif fmt == "jsonl":
        write_file(target, "".join(json.dumps(row(r), ensure_ascii=False) + "\n" for r in records))
    elif fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise AgentEnvError("--format parquet needs pyarrow: pip install 'agentenv-core[parquet]'") from None
        from agentenv.files import staged

        with staged(target) as file:
            pq.write_table(pa.Table.from_pylist([row(r) for r in records]), file)
    else:
        raise AgentEnvError(f"--format {fmt}: give one of {', '.join(FORMATS)}")
    return len(records)


def configure(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``agentenv export``."""
    parser.add_argument("records", metavar="DIR", help="a records folder (agentenv serve --record DIR) or one shard")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="atif (a folder of trajectories), jsonl or parquet (rows for SFT and RL; default jsonl)",
    )
    parser.add_argument("--out", required=True, type=Path, help="the folder (atif) or file to write")
    parser.add_argument("--scored", action="store_true", help="only episodes with a verdict (scored)")


def run(args: argparse.Namespace) -> int:
    """Export the records; prints how many."""
    records = (r for r in read(args.records) if not args.scored or r.get("outcome") == "scored")
    count = export(records, args.out, args.format)
    print(f"wrote {count} episode(s) to {args.out} ({args.format})")
    return 0


def _arguments(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"_raw": str(text)}
