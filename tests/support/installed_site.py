"""Installed distributions made by hand on a folder put on sys.path, as an installer lays them out (``*.dist-info``
with METADATA and entry_points.txt, and the module beside it): importlib.metadata reads them as it reads any."""

from __future__ import annotations

import shutil
from pathlib import Path

from agentenv.cli.scaffold import scaffold

__all__ = ["Site"]


class Site:
    """A folder on sys.path holding installed distributions made by hand, as an installer would lay them out."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def install(
        self, dist: str, bundle: str, *, needs: str | None = "agentenv-core>=0.2,<1", ship: bool = True
    ) -> Path:
        """A distribution ``dist`` 1.0 registering ``bundle``: its module (a scaffolded bundle unless ``ship`` is
        false) and its metadata, which declares ``needs`` (no agentenv-core range when None)."""
        module = f"{dist.replace('-', '_')}_bundle"
        folder = self.root / module
        if ship:
            made = self.root.parent / f"made-{module}"
            scaffold(made, bundle, package=False)
            shutil.copytree(made, folder)
        else:
            folder.mkdir()
        (folder / "__init__.py").write_text("")
        info = self.root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        requires = f"Requires-Dist: {needs}\n" if needs else ""
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n{requires}")
        (info / "entry_points.txt").write_text(f"[agentenv.bundles]\n{bundle} = {module}\n")
        return folder
