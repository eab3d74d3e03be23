"""Bundles: a folder with bundle.yaml (name, envs, agents, where the tasks are) and its tasks.

A ``Bundle`` is what ``load_bundle(path)`` (``agentenv.bundle.loader``) returns: everything read and checked up front.
A bad bundle is refused whole with a ``BundleError`` listing every problem by file, field and line (or row and
column), each with the fix. The parts of a bundle (``Task``, ``Toolset``, ...) are defined in ``agentenv.specs``, and
the task sources in ``agentenv.bundle.tasksources``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.env import Tool
from agentenv.errors import BundleProblem
from agentenv.plugins import Plugins
from agentenv.specs import (
    BUNDLE_FILE,
    AgentSpec,
    EnvSpec,
    Task,
    Toolset,
)

__all__ = ["Bundle"]  # the face, agentenv.bundle, names the rest


@dataclass
class Bundle:
    """A loaded, checked bundle. Tasks keep their load order; ``index`` counts within a split."""

    name: str
    path: Path
    description: str
    envs: dict[str, EnvSpec]
    agents: dict[str, AgentSpec]
    tasks: list[Task]
    toolset_keys: dict[str, str]
    toolsets: dict[str, Toolset]
    verifiers: dict[tuple[str, str], Any]
    env_tools: dict[str, list[Tool] | None]
    declared_splits: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # task id -> its file (or "file row N"), for messages
    # what may be a mistake and was not refused (an unknown JSON Schema keyword): load_bundle(strict=True) refuses it
    warnings: list[BundleProblem] = field(default_factory=list)
    # the plugins it was loaded with: its episodes need the same env kinds, verifier kinds and rules
    plugin_set: Plugins | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id = {t.id: t for t in self.tasks}
        splits: dict[str, list[Task]] = {name: [] for name in self.declared_splits}
        self._index: dict[str, int] = {}
        for task in self.tasks:
            members = splits.setdefault(task.split, [])
            self._index[task.id] = len(members)
            members.append(task)
        # tuples: a split is handed out as is (no copy per call: the Task API pages through 100,000 tasks)
        self._splits: dict[str, tuple[Task, ...]] = {name: tuple(members) for name, members in splits.items()}

    @property
    def splits(self) -> list[str]:
        """The splits: those declared in bundle.yaml (possibly empty), then any others in order of appearance."""
        return list(self._splits)

    def split(self, name: str) -> Sequence[Task]:
        """The tasks of split ``name``, in load order; a ``KeyError`` names the splits that exist."""
        if name not in self._splits:
            raise KeyError(f"bundle {self.name!r} has no split {name!r}; its splits: {', '.join(self.splits)}")
        return self._splits[name]

    def task(self, task_id: str) -> Task:
        """The task with id ``task_id``; a ``KeyError`` says how to list them."""
        if task_id not in self._by_id:
            raise KeyError(f"bundle {self.name!r} has no task {task_id!r}; list them with: agentenv tasks {self.path}")
        return self._by_id[task_id]

    def source(self, task: Task) -> str:
        """Where the task was read: its file relative to the bundle (``tasks/q-001.yaml``), or a dataset's file and
        row (``data/problems.jsonl row 41``); the bundle's own file for a task built in code."""
        return self.sources.get(task.id, BUNDLE_FILE)

    def index_of(self, task: Task) -> int:
        """The task's position within its split."""
        return self._index[task.id]

    def toolset(self, task: Task) -> Toolset:
        """The task's effective toolset (after the toolset hooks)."""
        return self.toolsets[task.id]

    def toolset_key(self, task: Task) -> str:
        """The task's toolset key: equal for tasks whose effective toolsets are equal."""
        return self.toolset_keys[task.id]

    def by_toolset(self, tasks: Iterable[Task] | None = None) -> dict[str, list[Task]]:
        """Tasks grouped by toolset key, keys in first-seen order."""
        groups: dict[str, list[Task]] = {}
        for task in self.tasks if tasks is None else tasks:
            groups.setdefault(self.toolset_keys[task.id], []).append(task)
        return groups
