"""Reading a folder of episode records back: every whole line of every shard, oldest first."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentenv.errors import AgentEnvError
from agentenv.record.writer import SHARD_GLOB

__all__ = ["read", "rollouts", "shards"]

log = logging.getLogger("agentenv.record")


def shards(where: str | os.PathLike[str]) -> list[Path]:
    """The shards of a records folder, oldest first (or ``[where]`` when it is one JSON-lines file)."""
    path = Path(where)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise AgentEnvError(f"{path}: no such records folder or file; give the folder agentenv serve --record wrote")
    return sorted(path.glob(SHARD_GLOB))


def read(where: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every record under ``where`` (a records folder, or one shard), as dicts, in the order they were written.

    A shard's unfinished last line (its writer was killed while writing it) is left out, as is a line that is not a
    JSON object (logged, naming the file and line); a shard removed meanwhile (the folder's bound) is skipped.
    """
    for path in shards(where):
        try:
            file = path.open("rb")
        except FileNotFoundError:
            continue
        with file:
            for number, line in enumerate(file, 1):
                if not line.endswith(b"\n"):
                    log.info("%s:%d: an unfinished last line (its writer was stopped) is left out", path, number)
                    break
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    log.warning("%s:%d: not a JSON line (%s); left out", path, number, exc)
                    continue
                if isinstance(record, dict):
                    yield record


def rollouts(records: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records grouped by rollout, each group's attempts in order (an episode without a rollout is its own)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(str(record.get("rollout") or record.get("id")), []).append(record)
    return [sorted(group, key=lambda r: int(r.get("attempt") or 1)) for group in groups.values()]
