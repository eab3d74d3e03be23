"""The import paths of modules that moved in agentenv-core 0.2.0, kept for one release.

Core's modules live in folders by layer (``plugins``, ``bundle``, ``sandbox``, ``engine``, ``client``, ``cli``), each
with a face. Importing an old path gives the module at its new one, with a ``DeprecationWarning`` that names it; the old
paths go in 0.3.0.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Final

__all__ = ["MOVED", "install"]

MOVED: Final = {
    "agentenv._envchecks": "agentenv.bundle.envchecks",
    "agentenv._loader": "agentenv.bundle.loader",
    "agentenv._pipes": "agentenv.sandbox.pipes",
    "agentenv._plugin_checks": "agentenv.plugins.checks",
    "agentenv._reaper": "agentenv.sandbox.reaper",
    "agentenv._taskchecks": "agentenv.bundle.taskchecks",
    "agentenv._yaml": "agentenv.bundle.yaml_lines",
    "agentenv._yaml_events": "agentenv.bundle.yaml_events",
    "agentenv.agentproc": "agentenv.engine.agentproc",
    "agentenv.agents": "agentenv.engine.agents",
    "agentenv.bash": "agentenv.engine.bash",
    "agentenv.blame": "agentenv.engine.blame",
    "agentenv.builtins": "agentenv.engine.builtins",
    "agentenv.commands": "agentenv.cli.commands",
    "agentenv.dataset_tasks": "agentenv.bundle.dataset_tasks",
    "agentenv.deployment": "agentenv.engine.deployment",
    "agentenv.envkinds": "agentenv.engine.envkinds",
    "agentenv.episode": "agentenv.engine.episode",
    "agentenv.hookspecs": "agentenv.plugins.hookspecs",
    "agentenv.installed": "agentenv.bundle.installed",
    "agentenv.internals": "agentenv.plugins.internals",
    "agentenv.lost": "agentenv.client.lost",
    "agentenv.pool": "agentenv.client.pool",
    "agentenv.procs": "agentenv.sandbox.procs",
    "agentenv.qa": "agentenv.cli.qa",
    "agentenv.records": "agentenv.plugins.records",
    "agentenv.rollout": "agentenv.client.rollout",
    "agentenv.sandbox.backend": "agentenv.sandboxing",
    "agentenv.scaffold": "agentenv.cli.scaffold",
    "agentenv.scoring": "agentenv.engine.scoring",
    "agentenv.session": "agentenv.client.session",
    "agentenv.settings": "agentenv.client.settings",
    "agentenv.sync": "agentenv.client.sync",
    "agentenv.targets": "agentenv.plugins.targets",
    "agentenv.taskapi": "agentenv.client.taskapi",
    "agentenv.tasksources": "agentenv.bundle.tasksources",
    "agentenv.threads": "agentenv.engine.threads",
    "agentenv.toolsets": "agentenv.bundle.toolsets",
    "agentenv.transport": "agentenv.client.transport",
    "agentenv.verifiers": "agentenv.engine.verifiers",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at the new one."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new} in agentenv-core 0.2.0: import it from there (the old path goes in 0.3.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the old path's spec on the module: give it back its own
        module.__spec__ = self._specs[module.__name__]


def install() -> None:
    """Put the old paths' finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.append(_Moved())
