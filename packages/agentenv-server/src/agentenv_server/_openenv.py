"""Importing OpenEnv without its web UI.

``openenv.core`` imports its Gradio web interface eagerly (about 7 of the 10 s of a cold import),
but skips it when Gradio is missing. Neither agentenv's client nor its server uses that UI, so
Gradio is hidden while ``openenv.core`` is first imported. Gradio itself stays importable afterwards.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any

__all__ = ["import_openenv"]

_lock = threading.Lock()


class _NoGradio(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "gradio" or name.startswith("gradio."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def import_openenv() -> None:
    """Import ``openenv.core`` (once), without Gradio unless something already imported it."""
    with _lock:
        if "openenv.core" in sys.modules:
            return
        if "gradio" in sys.modules:
            import openenv.core

            return
        blocker = _NoGradio()
        sys.meta_path.insert(0, blocker)
        try:
            import openenv.core  # noqa: F401
        finally:
            sys.meta_path.remove(blocker)
