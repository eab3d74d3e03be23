"""``load_bundle`` and its reader: bundle.yaml, the envs and their tools, then every task, checked as it streams in.

Loading is linear in the number of tasks: a task is validated and checked when its source yields it
(the checks of one task are ``agentenv.bundle.taskchecks``), work that tasks share (a toolset's check and key,
a reward rule) is done once per distinct value, and line numbers are looked up only for a task that has
a problem.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from agentenv.bundle.envchecks import AGENTS, ENVS, EnvChecks
from agentenv.bundle.installed import find_bundle
from agentenv.bundle.loaded import Bundle
from agentenv.bundle.taskchecks import Loc, TaskChecks, column_of, pydantic_problems
from agentenv.bundle.tasksources import RawTask, dotted, row_field, undotted
from agentenv.bundle.yaml_lines import Lines, SyntaxProblem, line_of, read_yaml
from agentenv.env import Tool
from agentenv.errors import BundleError, BundleProblem
from agentenv.plugins import Plugins, plugins
from agentenv.specs import (
    BUNDLE_FILE,
    AgentSpec,
    BundleFile,
    DeployStep,
    EnvSpec,
    RewardSpec,
    Task,
    Toolset,
    check_name,
)

__all__ = ["MAX_LISTED", "Loader", "load_bundle"]

# A refusal lists this many problems; a 100,000-task bundle with one mistake in its template would
# otherwise print 100,000 lines that say the same thing.
MAX_LISTED = 200


log = logging.getLogger("agentenv.bundle")


class Loader(TaskChecks, EnvChecks):
    """One load of one bundle: ``load()`` returns it, or raises ``BundleError`` listing every problem."""

    def __init__(self, path: Path, plugin_set: Plugins, *, strict: bool = False) -> None:
        self.root = path.parent if path.is_file() else path
        self.plugins = plugin_set
        self.strict = strict  # warnings are problems
        self.problems: list[BundleProblem] = []
        self.warnings: list[BundleProblem] = []
        self.unlisted = 0
        self._toolset_checks: dict[Any, tuple[str, list[tuple[Loc, str]]]] = {}
        self._tools_bytes: dict[str, int] = {}
        self._schemas_told: set[tuple[str, str]] = set()
        self._key_vars: set[str] = set()  # every endpoint's key_var: never passed to a program (pass_env)

    # -- problems -----------------------------------------------------------------------------

    def _add(self, problem: BundleProblem) -> bool:
        if len(self.problems) >= MAX_LISTED:
            self.unlisted += 1
            return False
        self.problems.append(problem)
        return True

    def problem(self, file: str, loc: Loc, message: str, lines: Lines | None = None) -> None:
        if len(self.problems) >= MAX_LISTED:  # counted, and no line looked up (that may parse a file again)
            self.unlisted += 1
            return
        self._add(BundleProblem(file, dotted(loc), message, line_of(lines, loc) if lines is not None else None))

    def warn(self, file: str, loc: Loc, message: str, lines: Lines) -> None:
        """What may be a mistake and is not refused (a problem in strict mode): kept, and logged."""
        if self.strict:
            self.problem(file, loc, message, lines)
            return
        warning = BundleProblem(file, dotted(loc), message, line_of(lines, loc))
        self.warnings.append(warning)
        log.warning("bundle %s: %s", self.root, warning)

    def task_problem(self, raw: RawTask, loc: Loc, message: str) -> None:
        """A problem of a task, named by file and line, or by file, row and column for a dataset row."""
        if raw.row is None:
            self.problem(raw.file, loc, message, raw.lines)
            return
        column = column_of(raw.columns, loc)
        self._add(BundleProblem(raw.file, row_field(raw.row, column, loc), message, raw.lines.get(())))

    def refuse(self, name: str) -> BundleError:
        problems = list(self.problems)
        if self.unlisted:
            problems.append(
                BundleProblem(f"(+{self.unlisted} more problems)", "", "not listed; fix the ones above and load again")
            )
        return BundleError(name, problems)

    # -- the bundle ---------------------------------------------------------------------------

    def load(self) -> Bundle:
        """The bundle, checked whole; ``BundleError`` listing every problem."""
        # A load builds millions of objects and frees almost none: the cycle collector would walk all of
        # them again and again (three times the work at 100,000 tasks). It runs again after the load.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._load()
        finally:
            if was_enabled:
                gc.enable()

    def _load(self) -> Bundle:
        shown = str(self.root)
        manifest = self.root / BUNDLE_FILE
        if not manifest.is_file():
            hint = "the folder does not exist" if not self.root.exists() else f"there is no {BUNDLE_FILE} in it"
            fix = f"point at a bundle folder or create {BUNDLE_FILE} with name, envs and tasks"
            raise BundleError(shown, [BundleProblem(str(manifest), "", f"missing file ({hint}); {fix}")])
        data, lines = self._read(manifest)
        if data is None and self.problems:
            raise self.refuse(shown)
        if not isinstance(data, dict):
            raise BundleError(shown, [BundleProblem(BUNDLE_FILE, "", "must be a mapping with name, envs and tasks", 1)])
        known = BundleFile.model_fields
        for key in data:
            if key not in known:
                self.problem(BUNDLE_FILE, (key,), f"unknown field; the fields are {', '.join(sorted(known))}", lines)
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            self.problem(BUNDLE_FILE, ("name",), "missing; give the bundle a name (name: my-bundle)", lines)
            name = self.root.name
        envs, refused = self._kinded(ENVS, data.get("envs") or {}, lines)
        agents, _ = self._kinded(AGENTS, data.get("agents") or {}, lines)
        # an env its kind refused is not asked for its tools: that would tell the same problem again
        env_tools = {env.name: None if env.name in refused else self._describe(env, lines) for env in envs.values()}
        defaults = self._defaults(data.get("defaults") or {}, lines)
        declared = self._splits(data.get("splits"), lines)
        tasks, toolsets, keys, verifiers, sources = self._tasks(
            data.get("tasks"), lines, defaults, declared, envs, agents, env_tools
        )
        self._check_pass_env(envs, agents, lines)
        if not tasks and not self.problems:
            self.problem(BUNDLE_FILE, ("tasks",), "no tasks found; check the glob (tasks: tasks/*.yaml)", lines)
        if self.problems:
            raise self.refuse(name)
        return Bundle(
            name=name,
            path=self.root,
            description=str(data.get("description") or ""),
            envs=envs,
            agents=agents,
            tasks=tasks,
            toolset_keys=keys,
            toolsets=toolsets,
            verifiers=verifiers,
            env_tools=env_tools,
            declared_splits=list(declared or []),
            sources=sources,
            warnings=self.warnings,
            plugin_set=self.plugins,
        )

    def _splits(self, declared: Any, lines: Lines) -> list[str] | None:
        """bundle.yaml's splits, or None (not given, or refused)."""
        if declared is None:
            return None
        if not isinstance(declared, list) or not all(isinstance(s, str) for s in declared):
            self.problem(BUNDLE_FILE, ("splits",), "must be a list of split names (splits: [train, eval])", lines)
            return None
        for i, split in enumerate(declared):
            try:
                check_name(split, "split", "rename it (train, eval, test)")
            except ValueError as exc:
                self.problem(BUNDLE_FILE, ("splits", i), str(exc), lines)
        return declared

    def _tasks(
        self,
        source: Any,
        lines: Lines,
        defaults: Mapping[str, Any],
        declared: list[str] | None,
        envs: Mapping[str, EnvSpec],
        agents: Mapping[str, AgentSpec],
        env_tools: Mapping[str, list[Tool] | None],
    ) -> tuple[list[Task], dict[str, Toolset], dict[str, str], dict[tuple[str, str], Any], dict[str, str]]:
        """Every task the source yields, checked as it comes: the tasks, their toolsets, keys, verifiers and where
        each was read."""
        declared_set = set(declared or ())
        tasks: list[Task] = []
        where: dict[str, str] = {}  # task id -> where it was read (for a duplicate)
        toolsets: dict[str, Toolset] = {}
        keys: dict[str, str] = {}
        verifiers: dict[tuple[str, str], Any] = {}
        for raw in self._raw_tasks(source, lines):
            task = self._task(raw, defaults)
            if task is None:
                continue
            if task.id in where:
                message = f"duplicate task id {task.id!r} (also in {where[task.id]}); give each task its own id"
                self.task_problem(raw, ("id",), message)
                continue
            where[task.id] = raw.file if raw.row is None else f"{raw.file} row {raw.row}"
            tasks.append(task)
            toolset = self.plugins.apply_toolset_hooks(task, task.toolset)
            toolsets[task.id] = toolset
            keys[task.id] = self._toolset_key(raw, toolset, envs, env_tools)
            self._check_frames(task, raw, keys[task.id])
            verifiers.update(self._verifiers(task, raw, toolset))
            self._check_reward(task, raw)
            self._check_deploy(task, raw, agents)
            if declared is not None and task.split not in declared_set:
                self.task_problem(
                    raw,
                    ("split",),
                    f"split {task.split!r} is not one of the bundle's splits ({', '.join(declared)}); use one of "
                    f"them or add it to splits in {BUNDLE_FILE}",
                )
        return tasks, toolsets, keys, verifiers, where

    def _read(self, path: Path) -> tuple[Any, Lines]:
        try:
            return read_yaml(path, BUNDLE_FILE)
        except SyntaxProblem as exc:
            self._add(exc.problem)
        except (OSError, UnicodeDecodeError) as exc:
            self.problem(BUNDLE_FILE, (), f"cannot be read ({exc}); fix the file")
        return None, {}

    def _defaults(self, raw: Any, lines: Lines) -> dict[str, Any]:
        """The defaults, their toolset and reward validated once: every task that inherits them shares them."""
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, ("defaults",), "must be a mapping of task fields", lines)
            return {}
        defaults = dict(raw)
        for key in [k for k in defaults if k not in Task.model_fields]:
            # said once, here, rather than in every task that inherits it
            fields = ", ".join(sorted(Task.model_fields))
            self.problem(BUNDLE_FILE, ("defaults", key), f"unknown task field; the fields are {fields}", lines)
            del defaults[key]
        for key, model in _DEFAULT_MODELS.items():
            if key in defaults:
                value = defaults[key]
                try:
                    defaults[key] = model.validate_python({"rule": value} if isinstance(value, str) else value)
                except ValidationError as exc:
                    for loc, message in pydantic_problems(exc):
                        self.problem(BUNDLE_FILE, ("defaults", key, *loc), message, lines)
                    del defaults[key]
        return defaults

    # -- tasks --------------------------------------------------------------------------------

    def _raw_tasks(self, raw: Any, lines: Lines) -> Iterator[RawTask]:
        if raw is None:
            self.problem(BUNDLE_FILE, ("tasks",), "missing; say where the tasks are (tasks: tasks/*.yaml)", lines)
            return
        if isinstance(raw, dict):
            config = dict(raw)
            source_name = config.pop("source", "yaml")
        else:
            config, source_name = raw, "yaml"
        sources = self.plugins.task_sources()
        if source_name not in sources:
            message = f"unknown task source {source_name!r}; known: {', '.join(sorted(sources))}"
            self.problem(BUNDLE_FILE, ("tasks", "source"), message, lines)
            return
        try:
            for item in sources[source_name].read(config, self.root):
                if isinstance(item, BundleProblem):
                    if item.file == BUNDLE_FILE and item.line is None:  # the source knows the field, not its line
                        item = replace(item, line=line_of(lines, undotted(item.field)))
                    self._add(item)
                else:
                    yield item
        except Exception as exc:
            message = f"task source {source_name!r} failed: {type(exc).__name__}: {exc}"
            self.problem(BUNDLE_FILE, ("tasks",), message, lines)


def load_bundle(path: str | Path, *, plugin_set: Plugins | None = None, strict: bool = False) -> Bundle:
    """Read and check the bundle at ``path`` (its folder or its bundle.yaml), or the installed bundle of that name.

    Raises ``BundleError`` listing every problem; nothing is half-loaded. ``agentenv.bundle.installed.find_bundle``
    says how a name is told from a path. What may be a mistake is kept in ``Bundle.warnings`` (and logged), or
    with ``strict`` refused as a problem.
    """
    return Loader(find_bundle(path), plugin_set or plugins(), strict=strict).load()


# the defaults validated once (a task's own fields are validated with the task)
_DEFAULT_MODELS: Final[dict[str, TypeAdapter[Any]]] = {
    "toolset": TypeAdapter(Toolset),
    "reward": TypeAdapter(RewardSpec),
    "deploy": TypeAdapter(list[DeployStep]),
}
