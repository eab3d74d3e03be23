"""Bundles: ``bundle.yaml`` and its task sources read, checked and loaded as a ``Bundle``; installed bundles found.

``load_bundle(folder)`` reads and checks a bundle (every problem named with its file and line, all at once) and
returns the ``Bundle``; ``find_bundle(name_or_folder)`` resolves a bundle installed as a package (the
``agentenv.bundles`` entry-point group) or a folder. The bundle's records (``Task``, ``Toolset``, ``EnvSpec``, ...)
are ``agentenv.specs``'; they are named here too, as they always were.

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "Bundle": "loaded",
    "load_bundle": "loader",
    "AgentSpec": ".specs",
    "BASH_TOOL": ".specs",
    "BUNDLE_FILE": ".specs",
    "EnvSpec": ".specs",
    "RewardSpec": ".specs",
    "SolutionCall": ".specs",
    "SolutionTurn": ".specs",
    "Task": ".specs",
    "Toolset": ".specs",
    "Turn": ".specs",
    "VerifierSpec": ".specs",
    "GROUP": "installed",
    "InstalledBundle": "installed",
    "find_bundle": "installed",
    "installed_bundles": "installed",
    "RawTask": "tasksources",
    "read_yaml_tasks": "tasksources",
    "read_dataset_tasks": "dataset_tasks",
    "effective_tools": "toolsets",
    "key_name": "toolsets",
    "reward_problems": "taskchecks",
}

__all__ = [
    "BASH_TOOL",
    "BUNDLE_FILE",
    "GROUP",
    "AgentSpec",
    "Bundle",
    "EnvSpec",
    "InstalledBundle",
    "RawTask",
    "RewardSpec",
    "SolutionCall",
    "SolutionTurn",
    "Task",
    "Toolset",
    "Turn",
    "VerifierSpec",
    "effective_tools",
    "find_bundle",
    "installed_bundles",
    "key_name",
    "load_bundle",
    "read_dataset_tasks",
    "read_yaml_tasks",
    "reward_problems",
]

if TYPE_CHECKING:
    from agentenv.bundle.dataset_tasks import read_dataset_tasks
    from agentenv.bundle.installed import GROUP, InstalledBundle, find_bundle, installed_bundles
    from agentenv.bundle.loaded import Bundle
    from agentenv.bundle.loader import load_bundle
    from agentenv.bundle.taskchecks import reward_problems
    from agentenv.bundle.tasksources import RawTask, read_yaml_tasks
    from agentenv.bundle.toolsets import effective_tools, key_name
    from agentenv.specs import (
        BASH_TOOL,
        BUNDLE_FILE,
        AgentSpec,
        EnvSpec,
        RewardSpec,
        SolutionCall,
        SolutionTurn,
        Task,
        Toolset,
        Turn,
        VerifierSpec,
    )


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
