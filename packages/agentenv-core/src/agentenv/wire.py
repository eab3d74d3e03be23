"""What agentenv's server and session layer say to each other on top of OpenEnv's ``/ws`` protocol.

An episode is an OpenEnv session: ``reset`` starts a task (``task_id``, or ``split`` and ``index``),
each ``step`` is an ``EpisodeAction``. Errors the session layer must tell apart travel in OpenEnv's
error frames as ``[CODE] message``. Both sides import these names, so they cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["Code", "Event", "Op", "coded", "parse_coded"]

PROTOCOL: Final = 1


class Op:
    """``step`` actions (the ``op`` field)."""

    CALL: Final = "call"  # tool, args
    END_TURN: Final = "end_turn"  # reply
    RESULT: Final = "result"  # read the result (None while the episode runs)
    FINISH: Final = "finish"  # end the episode now (tears it down; unscored if turns remain)


class Event:
    """What an observation answers (the ``event`` field)."""

    STARTED: Final = "started"
    TOOL: Final = "tool"
    TURN: Final = "turn"
    RESULT: Final = "result"


class Code:
    """Error codes carried as ``[CODE]`` at the start of an error frame's message."""

    UNKNOWN_SPLIT: Final = "UNKNOWN_SPLIT"
    UNKNOWN_TASK: Final = "UNKNOWN_TASK"
    BAD_RESET: Final = "BAD_RESET"
    NO_EPISODE: Final = "NO_EPISODE"
    TOO_LARGE: Final = "MESSAGE_TOO_LARGE"
    IDLE: Final = "IDLE_TIMEOUT"
    RESTARTING: Final = "RESTARTING"
    CAPACITY: Final = "CAPACITY_REACHED"  # OpenEnv's own code for a full server


_CODED = re.compile(r"^\[([A-Z_]+)\] (.*)$", re.DOTALL)


def coded(code: str, message: str) -> str:
    """``message`` tagged with ``code`` for the session layer."""
    return f"[{code}] {message}"


def parse_coded(message: str) -> tuple[str | None, str]:
    """Split a tagged message into its code and text (code None when untagged)."""
    match = _CODED.match(message)
    return (match.group(1), match.group(2)) if match else (None, message)
