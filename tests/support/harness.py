"""Helpers of the harness tests: the harness bundle and a stand-in engine (its fixtures: tests.support.fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.paths import HARNESS
from tests.support.vllm_standin import Served, StandinEngine, serve

__all__ = ["HARNESS", "PLACEHOLDER", "Engine", "prompt_of"]

PLACEHOLDER = "http://127.0.0.1:9/v1"  # where the harness bundle's judges and user simulators point until patched


def _probe(request: dict[str, Any]) -> bool:
    first = str((request.get("messages") or [{}])[0].get("content"))
    return first.startswith(("Reply with", "Use the bash tool to list the files"))


class Engine:
    """A running stand-in engine: its state (requests, models) and its URL."""

    def __init__(self, models: list[str] | None = None, mode: str = "tokens") -> None:
        self.state: StandinEngine
        self.server: Served
        self.state, self.server = serve(models, mode)
        self.url = self.server.url

    def chats(self) -> list[dict[str, Any]]:
        """The chat requests it got, without the capture proxy's probes of the engine."""
        with self.state.lock:
            return [r for r in self.state.requests if r.get("messages") and not _probe(r)]

    def saw(self, text: str) -> bool:
        """Whether any chat request's messages held ``text``."""
        return any(text in str(r.get("messages")) for r in self.chats())


def prompt_of(bundle: Path | str, task_id: str, split: str) -> list[dict[str, str]]:
    """The prompt of ``task_id``'s row in ``prompt_rows(bundle, split)``."""
    from agentenv_harness import prompt_rows

    rows = prompt_rows(bundle, split)
    return next(row["prompt"] for row in rows if row["task_id"] == task_id)
