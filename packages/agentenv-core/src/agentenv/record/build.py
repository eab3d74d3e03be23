"""The record of one played episode (what ``Recorder`` writes): built from the engine's ``Episode`` when it ends."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from agentenv.engine.episode import Episode
    from agentenv.wire import EpisodeResult

__all__ = ["RECORD_VERSION", "episode_record"]

RECORD_VERSION: Final = 1


def episode_record(episode: Episode, result: EpisodeResult) -> dict[str, Any]:
    """What ``episode`` did and how it ended, as a JSON-ready dict (``agentenv.record.FIELDS``, in that order).

    A tool call's ``args`` are kept as their JSON text (as OpenAI's tool calls carry them), so every record has the
    same shape whatever the tools take, and ``datasets`` and pyarrow read a folder of them as one table.
    """
    task = episode.task
    attempt = episode.attempt
    turns = []
    for number, turn in enumerate(task.turns[: episode.turn + 1]):  # the turns the policy was shown
        calls = [
            {
                "tool": call.tool,
                "args": json.dumps(call.args, ensure_ascii=False),
                "answer": call.answer,
                "error": call.error,
                "seconds": round(call.seconds, 6),
            }
            for call in episode.calls
            if call.turn == number
        ]
        reply = episode.replies[number] if number < len(episode.replies) else None
        turns.append({"prompt": turn.prompt, "reply": reply, "calls": calls})
    step_turn = {v.id: n for n, turn in enumerate(task.turns) for v in turn.verifiers}
    steps = [{"id": step, "turn": step_turn.get(step, 0), "score": score} for step, score in result.scores.items()]
    ended = time.time()
    return {
        "record": RECORD_VERSION,
        "id": episode.episode_id,
        "rollout": attempt.rollout if attempt is not None else None,
        "attempt": attempt.number if attempt is not None else 1,
        "earlier": list(attempt.earlier) if attempt is not None else [],
        "client": attempt.client if attempt is not None else "",
        "step": attempt.step if attempt is not None else None,
        "bundle": episode.bundle.name,
        "task": task.id,
        "split": task.split,
        "index": episode.bundle.index_of(task),
        "purpose": episode.purpose,
        "system": task.system,
        "tools": [tool.name for tool in episode.tools],
        "turns": turns,
        "steps": steps,
        "outcome": result.outcome,
        "reward": result.reward,
        "reason": result.reason,
        "failure": asdict(result.failure) if result.failure is not None else None,
        "started": _stamp(episode.began),
        "ended": _stamp(ended),
        "seconds": {**asdict(result.seconds), "wall": round(ended - episode.began, 6)},
    }


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"
