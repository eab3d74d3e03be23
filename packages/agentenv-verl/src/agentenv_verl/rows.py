"""Single-turn rows: a served bundle's one-turn tasks as verl's standard dataset rows, scored by the reward function.

A row holds verl's standard fields (``data_source``, ``prompt``, ``ability``, ``reward_model`` with ``style``
and ``ground_truth``, ``extra_info`` with ``split``, ``index`` and ``task_id``) and no ``agent_name``: verl's
default agent loop plays it (``single_turn_agent``, or ``agentenv_single`` where configured), and
``agentenv_verl.reward.compute_score`` scores it by ``data_source`` and ``extra_info.task_id``. The
ground truth is empty: the verifiers stay on the server. Importing this module does not import verl.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentenv.wire import TaskRow

__all__ = ["single_turn_records", "single_turn_schema", "verl_rows"]

log = logging.getLogger("agentenv_verl")


@functools.cache
def single_turn_schema() -> Any:
    """The explicit Arrow schema of single-turn rows (an empty split keeps every column).

    pyarrow is imported here, not with the module: the plugin loads the writer for every ``agentenv`` command.
    """
    import pyarrow as pa

    message = pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())])
    reward_model = pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.string())])
    extra_info = pa.struct(
        [pa.field("split", pa.string()), pa.field("index", pa.int64()), pa.field("task_id", pa.string())]
    )
    return pa.schema(
        [
            pa.field("data_source", pa.string()),
            pa.field("prompt", pa.list_(message)),
            pa.field("ability", pa.string()),
            pa.field("reward_model", reward_model),
            pa.field("extra_info", extra_info),
        ]
    )


def single_turn_records(tasks: Iterable[TaskRow], bundle: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of ``tasks`` (of the bundle named ``bundle``) that have one turn, and the ids of those left out."""
    records: list[dict[str, Any]] = []
    left_out: list[str] = []
    for task in tasks:
        if task.turns != 1:
            left_out.append(task.id)
            continue
        records.append(
            {
                "data_source": f"agentenv/{bundle}",
                "prompt": task.messages(),
                "ability": bundle,
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"split": task.split, "index": task.index, "task_id": task.id},
            }
        )
    return records, left_out


def verl_rows(
    url: str, split: str = "train", *, token_var: str | None = None, reset_timeout: float = 300.0
) -> list[dict[str, Any]]:
    """The single-turn rows of ``split`` on the agentenv server at ``url`` (read a page at a time; no episode plays).

    Multi-turn tasks are left out (a warning names them): train them with ``AgentEnvAgentLoop``. Write the
    rows with their schema: ``pyarrow.Table.from_pylist(rows, schema=single_turn_schema())``.
    """
    from agentenv.client import Shared, iter_tasks, probe

    shared = Shared(url, token_var=token_var, reset_timeout=reset_timeout)
    info = probe(shared)
    records, left_out = single_turn_records(iter_tasks(shared, split, info=info), info.name)
    if left_out:
        shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
        log.warning(
            "left out %d multi-turn task(s) of %s split %r (%s): a single-turn row holds one answer; train them with "
            "AgentEnvAgentLoop (python -m agentenv_verl URL OUT)",
            len(left_out),
            url,
            split,
            shown,
        )
    return records
