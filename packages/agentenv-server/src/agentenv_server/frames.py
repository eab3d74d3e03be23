"""The frames a client may send on ``/ws``, checked before OpenEnv's loop sees them, and the error frames sent back.

OpenEnv's loop parses each text frame with Python's ``json`` and ends the session on what that cannot take (JSON
nested past the parser's recursion limit, an integer of more than 4,300 digits), and passes on what standard JSON
lacks (``NaN``, ``Infinity``, ``1e999``) to the env, whose programs then read non-standard JSON. Every such frame
gets an error frame here instead (``BAD_FRAME``; ``MESSAGE_TOO_LARGE`` for one over ``max_message_bytes``) and the
session goes on. So does OpenEnv's ``mcp`` frame, which agentenv does not serve. Most frames are small objects
checked without parsing them; a frame that may hold one of these (its text names ``NaN``, ``Infinity`` or
``"mcp"``, has a long run of digits or a 3-digit exponent, or nests deep) is parsed once more, strictly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agentenv.wire import Code

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "closing_restart", "error_frame", "problem", "too_large"]

MAX_DEPTH = 100  # JSON nesting a frame may have (OpenEnv's loop fails on what Python's parser cannot take)
MAX_INT_DIGITS = 4300  # Python's default limit on int(str): a longer integer is refused (sys.set_int_max_str_digits)
# what may hide a number standard JSON lacks: 300 digits make a float past 1e308 (inf), a 3-digit exponent too.
# The lookbehind makes each run of digits tried once (linear time, also on a frame of 4 MiB of digits).
# And OpenEnv's ``mcp`` frames, which agentenv does not serve (they reach a session's env outside its episode).
_SUSPECT = re.compile(r'(?<![0-9])[0-9]{300}|[eE][-+]?[0-9]{3}|NaN|Infinity|"mcp"')


class _NotStandard(ValueError):
    """A number standard JSON cannot carry (``parse_constant`` and ``parse_float`` raise it)."""


def _constant(name: str) -> Any:
    raise _NotStandard(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStandard(f"{text[:40]}{'...' if len(text) > 40 else ''} is too large for a JSON number (over 1e308)")
    return value


def problem(message: Mapping[str, Any], limit: int) -> tuple[str, str] | None:
    """The error frame's code and message for a frame OpenEnv's loop cannot take, else None.

    ``limit``: ``max_message_bytes``. The size is also checked as the frame arrives (``too_large``); this checks it
    again for a frame that came another way.
    """
    text = message.get("text")
    if text is None:
        size = len(message.get("bytes") or b"")
        if size > limit:
            return Code.TOO_LARGE, too_large(size, limit)
        return Code.BAD_FRAME, (
            f"a binary frame ({size} bytes) was dropped: agentenv's protocol is JSON text frames "
            '({"type": ..., "data": {...}}); the session goes on'
        )
    size = len(text)
    if limit // 4 < size <= limit:  # a character is 1 to 4 bytes: encode only when that decides
        size = len(text.encode(errors="replace"))
    if size > limit:
        return Code.TOO_LARGE, too_large(size, limit)
    nesting = text.count("[") + text.count("{")
    if text[:1] == "{" and nesting <= MAX_DEPTH and _SUSPECT.search(text) is None:
        return None  # an object no deeper than the limit (or not JSON: OpenEnv answers INVALID_JSON and goes on)
    try:
        frame = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        return Code.BAD_FRAME, _too_deep()
    except json.JSONDecodeError:
        return None  # OpenEnv answers INVALID_JSON itself, and goes on
    except _NotStandard as exc:
        return Code.BAD_FRAME, _not_standard(str(exc))
    except ValueError:  # int() past its digit limit: the frame holds an integer of more than MAX_INT_DIGITS digits
        return Code.BAD_FRAME, _not_standard(
            f"an integer of more than {MAX_INT_DIGITS} digits is not one JSON peers read"
        )
    if not isinstance(frame, dict):
        kind = _JSON_TYPES.get(type(frame), "a value")
        return Code.BAD_FRAME, (
            f'a frame must be a JSON object ({{"type": ..., "data": {{...}}}}), not {kind}; it was dropped and the '
            "session goes on"
        )
    if nesting > MAX_DEPTH and _depth(frame) > MAX_DEPTH:
        return Code.BAD_FRAME, _too_deep()
    if frame.get("type") == "mcp":
        return Code.BAD_FRAME, (
            "agentenv's protocol has no mcp frames (OpenEnv's MCP over /ws is not served): call tools with a step "
            '({"type": "step", "data": {"op": "call", ...}}); the session goes on'
        )
    return None


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_JSON_TYPES[type(None)] = "null"


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (without recursion: it may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def too_large(size: int, limit: int) -> str:
    """The message of a frame over ``max_message_bytes``."""
    return (
        f"message of {size} bytes is over the server's limit of {limit} bytes (max_message_bytes, "
        "--max-message-bytes); it was dropped and the session goes on"
    )


def _too_deep() -> str:
    return f"a frame nested deeper than {MAX_DEPTH} levels was dropped; the session goes on"


def _not_standard(what: str) -> str:
    return (
        f"a frame holding a number standard JSON cannot carry was dropped ({what}): send finite numbers and integers "
        f"of at most {MAX_INT_DIGITS} digits; the session goes on"
    )


def error_frame(code: str, message: str, **extra: Any) -> str:
    """An OpenEnv error frame carrying agentenv's own code (``agentenv.wire.Code``)."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


async def closing_restart(send: Any) -> None:
    """Tell the client the service restarts and close with code 1012 (as uvicorn closes at shutdown): clients replay
    the episode or wait for the server."""
    text = (
        "the server is shutting down; the episode was torn down. Replay it (waits_for_server=True waits for a server)"
    )
    await send({"type": "websocket.send", "text": error_frame(Code.RESTARTING, text)})
    await send({"type": "websocket.close", "code": 1012, "reason": "restarting"})
