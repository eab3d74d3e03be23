"""A bundle's reference solutions as the conversations TRL would record, played on the server.

The demo warm-starts its tiny model on these: the tool answers and later prompts in them are the
server's own, so the model learns the exact form TRL shows it during GRPO.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentenv.bundle import Bundle

if TYPE_CHECKING:
    from .env import AgentEnv, TaskEnvironment
    from .tiny import Conversation

__all__ = ["reference_conversations", "tool_methods"]


def tool_methods(instance: TaskEnvironment) -> list[Callable[..., Any]]:
    """The instance's tools in the order TRL lists them (so a prompt renders as TRL renders it)."""
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def reference_conversations(
    env: AgentEnv, bundle: Bundle, split: str = "train", *, text_answer: bool = False
) -> list[Conversation]:
    """Each task's reference solution as the conversation TRL would record, played on ``env``'s server.

    Only conversations that score 1.0 are kept. With ``text_answer=True`` the first turn's tool calls
    are made, and then its reply is written as plain text instead of given to ``end_turn``: the
    rollout ends there with the turn unanswered, and the episode scores 0 (such are all kept).
    """
    classes = env.environments
    rows = {row["task_id"]: row for row in env.dataset_for(split)}
    out: list[Conversation] = []
    instances: dict[str, TaskEnvironment] = {}  # one per toolset, each playing the episodes one after another
    try:
        for task in bundle.split(split):
            if task.solution is None or task.id not in rows:
                continue
            row = rows[task.id]
            name = row.get("environment") or next(iter(classes))
            instance = instances.setdefault(name, classes[name]())
            instance.reset(**row)
            messages: list[dict[str, Any]] = [dict(m) for m in row["prompt"]]
            for turn in task.solution:
                for call in turn.calls:
                    answer = getattr(instance, call.tool)(**call.args)
                    messages += _exchange(call.tool, dict(call.args), answer)
                if text_answer:
                    break
                answer = instance.end_turn(reply=turn.reply)
                messages += _exchange("end_turn", {"reply": turn.reply}, answer)
            # the model's last word after the episode is over (or its answer, as text)
            messages.append({"role": "assistant", "content": task.solution[0].reply if text_answer else ""})
            if instance.get_reward() == 1.0 or text_answer:
                out.append((messages, tool_methods(instance)))
    finally:
        for instance in instances.values():
            instance._close()  # their sessions are the trainer's to use
    return out


def _exchange(tool: str, args: dict[str, Any], answer: str) -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": tool, "arguments": args}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": tool, "content": answer},
    ]
