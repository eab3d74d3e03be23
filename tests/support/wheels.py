"""Wheels built for the install tests (the workspace's packages, fixture plugins and bundles), all at once."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def build_wheels(uv: str, sources: Sequence[Path], dist: Path) -> None:
    """``uv build --wheel`` of each source folder into ``dist``, the builds running side by side; fails naming the
    first that did not build, with what it said."""
    builds = [
        subprocess.Popen([uv, "build", "--wheel", str(p), "--out-dir", str(dist)], stderr=subprocess.PIPE, text=True)
        for p in sources
    ]
    for source, build in zip(sources, builds):
        _, err = build.communicate()
        assert build.returncode == 0, f"uv build --wheel {source} failed:\n{err}"
