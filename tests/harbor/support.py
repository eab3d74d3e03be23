"""What the harbor tier's tests share: its bundles, and what a process left on the engine."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.containers import BASE, docker

__all__ = ["BASE", "SUITE", "UNSUPPORTED", "left_by_this_process"]

HERE = Path(__file__).resolve().parent
SUITE = HERE / "bundles" / "suite"
UNSUPPORTED = HERE / "bundles" / "unsupported"


def left_by_this_process() -> list[str]:
    """The containers this test process owns on the engine (by the owner label every agentenv container carries)."""
    return docker("ps", "-a", "-q", "--filter", f"label=agentenv.pid={os.getpid()}").split()
