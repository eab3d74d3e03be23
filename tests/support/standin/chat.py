"""What both stand-in models say in OpenAI's chat completions protocol: a tool call, an assistant message, the
completion around it, the model list and the refusal of a model they do not serve (vLLM answers these the same way
as OpenAI's API does, so one form serves both)."""

from __future__ import annotations

import json
from typing import Any


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """A tool call of an assistant message: ``arguments`` a dict (sent as JSON) or a str (sent as it is, malformed
    on purpose where a test wants that)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def completion(
    message: dict[str, Any],
    prompt_tokens: int,
    completion_tokens: int,
    *,
    completion_id: str = "cmpl-1",
    choice: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A ``chat.completion`` of one choice, ``message``: its finish reason from whether it calls tools; ``choice``
    adds to the choice (vLLM's token ids and log-probs), ``fields`` to the completion (its model, when created)."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": completion_id,
        "object": "chat.completion",
        **fields,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **(choice or {})}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }  # fmt: skip


def model_list(models: list[str], **fields: Any) -> dict[str, Any]:
    """The answer to ``GET /v1/models``; ``fields`` (a function of the model's name each) add to every entry."""
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", **{k: f(m) for k, f in fields.items()}} for m in models],
    }


def unknown_model(model: Any) -> dict[str, Any]:
    """The 404 body for a model the server does not serve."""
    return {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
