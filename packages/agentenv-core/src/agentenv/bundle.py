"""Bundles: a folder with bundle.yaml (name, envs, agents, where the tasks are) and its tasks.

``load_bundle(path)`` reads and checks everything up front. A bad bundle is refused whole with a
``BundleError`` listing every problem by file, field and line, each with the fix.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._yaml import Lines, _SyntaxProblem, line_of, read_yaml
from .env import Tool
from .errors import BundleError, BundleProblem, PluginError
from .plugins import Plugins, plugins

__all__ = [
    "AgentSpec",
    "Bundle",
    "EnvSpec",
    "RawTask",
    "RewardSpec",
    "SolutionCall",
    "SolutionTurn",
    "Task",
    "Toolset",
    "Turn",
    "VerifierSpec",
    "load_bundle",
]

BUNDLE_FILE = "bundle.yaml"
BASH_TOOL = "bash"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvSpec(BaseModel):
    """An env of a bundle: its kind, what to run, its config, and which tools each role gets.

    Fields other than these are the kind's own options (checked by the kind).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    kind: str = "python"
    target: str | None = None
    command: list[str] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    roles: dict[str, list[str]] | None = None

    @property
    def options(self) -> dict[str, Any]:
        """The kind-specific fields."""
        return dict(self.model_extra or {})

    def canonical(self) -> dict[str, Any]:
        """A JSON-ready form, stable across processes (part of toolset keys)."""
        return json.loads(json.dumps(self.model_dump(mode="json"), sort_keys=True))


class AgentSpec(BaseModel):
    """A solver program a task may deploy (used by harness integrations)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    kind: str = "process"
    command: list[str] = Field(default_factory=list)


class Toolset(_Model):
    """What a task offers the model: its envs' tools for ``role``, with per-env access changes.

    ``deny`` removes tools of an env from the role's set, ``allow`` adds tools the role would not
    otherwise get; ``bash`` offers a ``bash`` tool run in the episode's scratch folder.
    """

    envs: list[str] = Field(default_factory=list)
    role: str = "agent"
    deny: dict[str, list[str]] = Field(default_factory=dict)
    allow: dict[str, list[str]] = Field(default_factory=dict)
    bash: bool = False


class VerifierSpec(BaseModel):
    """A verifier of a turn: its step id (``answer-1``), its kind and the kind's fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    kind: str

    @property
    def params(self) -> dict[str, Any]:
        """The kind's own fields."""
        return dict(self.model_extra or {})


class Turn(_Model):
    """One turn: the prompt the model gets and the verifiers that score its reply."""

    prompt: str
    verifiers: list[VerifierSpec] = Field(default_factory=list)

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write the prompt the model gets on this turn")
        return value


class RewardSpec(_Model):
    """A reward rule by name with its parameters (``weights`` for ``weighted``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rule: str = "mean"

    @property
    def params(self) -> dict[str, Any]:
        """The rule's own fields."""
        return dict(self.model_extra or {})


class SolutionCall(_Model):
    """A tool call of a reference solution."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class SolutionTurn(_Model):
    """A turn of a reference solution: the tool calls, then the reply."""

    calls: list[SolutionCall] = Field(default_factory=list)
    reply: str = ""


class Task(_Model):
    """A task: id, split, system prompt, turns, toolset, reward rule, and a reference solution."""

    id: str
    split: str
    system: str = ""
    toolset: Toolset = Field(default_factory=Toolset)
    turns: list[Turn] = Field(min_length=1)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    solution: list[SolutionTurn] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_by_name(cls, value: Any) -> Any:
        return {"rule": value} if isinstance(value, str) else value

    @property
    def step_ids(self) -> list[str]:
        """Every verifier's step id, in turn order."""
        return [v.id for turn in self.turns for v in turn.verifiers]


@dataclass(frozen=True)
class RawTask:
    """A task as read by a task source, with the file and lines to name in errors."""

    data: Any
    file: str
    lines: Lines = field(default_factory=dict)


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
    # the plugins it was loaded with: its episodes need the same env kinds, verifier kinds and rules
    plugin_set: Plugins | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id = {t.id: t for t in self.tasks}
        self._splits: dict[str, list[Task]] = {name: [] for name in self.declared_splits}
        for task in self.tasks:
            self._splits.setdefault(task.split, []).append(task)

    @property
    def splits(self) -> list[str]:
        """The splits: those declared in bundle.yaml (possibly empty), then any others in order of appearance."""
        return list(self._splits)

    def split(self, name: str) -> list[Task]:
        """The tasks of split ``name``; a ``KeyError`` names the splits that exist."""
        if name not in self._splits:
            raise KeyError(f"bundle {self.name!r} has no split {name!r}; its splits: {', '.join(self.splits)}")
        return list(self._splits[name])

    def task(self, task_id: str) -> Task:
        """The task with id ``task_id``; a ``KeyError`` says how to list them."""
        if task_id not in self._by_id:
            raise KeyError(f"bundle {self.name!r} has no task {task_id!r}; list them with: agentenv tasks {self.path}")
        return self._by_id[task_id]

    def index_of(self, task: Task) -> int:
        """The task's position within its split."""
        return next(i for i, t in enumerate(self._splits[task.split]) if t.id == task.id)

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


def load_bundle(path: str | Path, *, plugin_set: Plugins | None = None) -> Bundle:
    """Read and check the bundle at ``path`` (its folder or its bundle.yaml).

    Raises ``BundleError`` listing every problem; nothing is half-loaded.
    """
    return _Loader(Path(path), plugin_set or plugins()).load()


# ---------------------------------------------------------------------------------------------


class _Loader:
    def __init__(self, path: Path, plugin_set: Plugins) -> None:
        self.root = path.parent if path.is_file() else path
        self.plugins = plugin_set
        self.problems: list[BundleProblem] = []
        self._task_lines: dict[tuple[str, str], Lines] = {}

    def problem(self, file: str, loc: tuple[str | int, ...], message: str, lines: Lines | None = None) -> None:
        self.problems.append(BundleProblem(file, _dotted(loc), message, line_of(lines, loc) if lines else None))

    def load(self) -> Bundle:
        shown = str(self.root)
        manifest = self.root / BUNDLE_FILE
        if not manifest.is_file():
            hint = "the folder does not exist" if not self.root.exists() else f"there is no {BUNDLE_FILE} in it"
            raise BundleError(
                shown,
                [
                    BundleProblem(
                        str(manifest),
                        "",
                        f"missing file ({hint}); point at a bundle folder or create "
                        f"{BUNDLE_FILE} with name, envs and tasks",
                    )
                ],
            )
        data, lines = self._read(manifest, BUNDLE_FILE)
        if data is None and self.problems:
            raise BundleError(shown, self.problems)
        if not isinstance(data, dict):
            raise BundleError(shown, [BundleProblem(BUNDLE_FILE, "", "must be a mapping with name, envs and tasks", 1)])
        known = {"name", "description", "envs", "agents", "tasks", "defaults", "splits"}
        for key in data:
            if key not in known:
                self.problem(BUNDLE_FILE, (key,), f"unknown field; the fields are {', '.join(sorted(known))}", lines)
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            self.problem(BUNDLE_FILE, ("name",), "missing; give the bundle a name (name: my-bundle)", lines)
            name = self.root.name
        envs = self._envs(data.get("envs") or {}, lines)
        agents = self._agents(data.get("agents") or {}, lines)
        env_tools = {env.name: self._describe(env, lines) for env in envs.values()}
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, dict):
            self.problem(BUNDLE_FILE, ("defaults",), "must be a mapping of task fields", lines)
            defaults = {}
        for key in [k for k in defaults if k not in Task.model_fields]:
            # said once, here, rather than in every task file that inherits it
            fields = ", ".join(sorted(Task.model_fields))
            self.problem(BUNDLE_FILE, ("defaults", key), f"unknown task field; the fields are {fields}", lines)
            defaults = {k: v for k, v in defaults.items() if k != key}
        raw_tasks = self._raw_tasks(data.get("tasks"), lines)
        tasks: list[Task] = []
        where: dict[str, str] = {}
        for raw in raw_tasks:
            task = self._task(raw, defaults)
            if task is None:
                continue
            if task.id in where:
                self.problem(
                    raw.file,
                    ("id",),
                    f"duplicate task id {task.id!r} (also in {where[task.id]}); give each task its own id",
                    raw.lines,
                )
                continue
            where[task.id] = raw.file
            self._task_lines[(raw.file, task.id)] = raw.lines
            tasks.append(task)
        toolsets: dict[str, Toolset] = {}
        keys: dict[str, str] = {}
        verifiers: dict[tuple[str, str], Any] = {}
        for raw_task in tasks:
            file = where[raw_task.id]
            toolset = self.plugins.apply_toolset_hooks(raw_task, raw_task.toolset)
            toolsets[raw_task.id] = toolset
            keys[raw_task.id] = self._check_toolset(raw_task, toolset, envs, env_tools, file)
            verifiers.update(self._verifiers(raw_task, file))
            self._check_reward(raw_task, file)
        declared = data.get("splits")
        if declared is not None:
            if not isinstance(declared, list) or not all(isinstance(s, str) for s in declared):
                self.problem(BUNDLE_FILE, ("splits",), "must be a list of split names (splits: [train, eval])", lines)
                declared = None
            else:
                for task in tasks:
                    if task.split not in declared:
                        self.problem(
                            where[task.id],
                            ("split",),
                            f"split {task.split!r} is not one of the bundle's "
                            f"splits ({', '.join(declared)}); use one of them or add it to splits in "
                            f"{BUNDLE_FILE}",
                            self._task_lines.get((where[task.id], task.id)),
                        )
        if not tasks and not self.problems:
            self.problem(BUNDLE_FILE, ("tasks",), "no tasks found; check the glob (tasks: tasks/*.yaml)", lines)
        if self.problems:
            raise BundleError(name, self.problems)
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
            plugin_set=self.plugins,
        )

    # -- files --------------------------------------------------------------------------------

    def _read(self, path: Path, shown: str) -> tuple[Any, Lines]:
        try:
            return read_yaml(path, shown)
        except _SyntaxProblem as exc:
            self.problems.append(exc.problem)
            return None, {}
        except OSError as exc:
            self.problem(shown, (), f"cannot be read: {exc.strerror}")
            return None, {}

    # -- envs and agents ----------------------------------------------------------------------

    def _envs(self, raw: Any, lines: Lines) -> dict[str, EnvSpec]:
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, ("envs",), "must map env names to their specs", lines)
            return {}
        kinds = self.plugins.env_kinds()
        out: dict[str, EnvSpec] = {}
        for name, spec in raw.items():
            loc: tuple[str | int, ...] = ("envs", name)
            if not isinstance(spec, dict):
                self.problem(BUNDLE_FILE, loc, "must be a mapping (kind, target, config)", lines)
                continue
            try:
                env = EnvSpec.model_validate({**spec, "name": str(name)})
            except ValidationError as exc:
                self._pydantic(exc, BUNDLE_FILE, loc, lines)
                continue
            kind = kinds.get(env.kind)
            if kind is None:
                self.problem(
                    BUNDLE_FILE,
                    (*loc, "kind"),
                    f"unknown env kind {env.kind!r}; known: "
                    f"{', '.join(sorted(kinds))} (or install the plugin that provides it)",
                    lines,
                )
                continue
            for message in kind.check(env, self.root):
                self.problem(BUNDLE_FILE, loc, message, lines)
            out[env.name] = env
        return out

    def _agents(self, raw: Any, lines: Lines) -> dict[str, AgentSpec]:
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, ("agents",), "must map agent names to their specs", lines)
            return {}
        out = {}
        for name, spec in raw.items():
            try:
                out[str(name)] = AgentSpec.model_validate({**(spec or {}), "name": str(name)})
            except ValidationError as exc:
                self._pydantic(exc, BUNDLE_FILE, ("agents", name), lines)
        return out

    def _describe(self, env: EnvSpec, lines: Lines) -> list[Tool] | None:
        try:
            tools = self.plugins.env_kinds()[env.kind].describe(env, self.root)
        except Exception as exc:
            self.problem(BUNDLE_FILE, ("envs", env.name), f"cannot list its tools: {type(exc).__name__}: {exc}", lines)
            return None
        if tools is not None and env.roles:
            names = {t.name for t in tools}
            for role, allowed in env.roles.items():
                for i, tool_name in enumerate(allowed):
                    if tool_name not in names:
                        self.problem(
                            BUNDLE_FILE,
                            ("envs", env.name, "roles", role, i),
                            f"role {role!r} names tool {tool_name!r}, which env {env.name!r} does not "
                            f"have; its tools: {', '.join(sorted(names))}",
                            lines,
                        )
        return tools

    # -- tasks --------------------------------------------------------------------------------

    def _raw_tasks(self, raw: Any, lines: Lines) -> list[RawTask]:
        if raw is None:
            self.problem(BUNDLE_FILE, ("tasks",), "missing; say where the tasks are (tasks: tasks/*.yaml)", lines)
            return []
        if isinstance(raw, dict):
            config = dict(raw)
            source_name = config.pop("source", "yaml")
        else:
            config, source_name = raw, "yaml"
        sources = self.plugins.task_sources()
        if source_name not in sources:
            self.problem(
                BUNDLE_FILE,
                ("tasks", "source"),
                f"unknown task source {source_name!r}; known: {', '.join(sorted(sources))}",
                lines,
            )
            return []
        try:
            return list(sources[source_name].read(config, self.root))
        except _ReadProblems as exc:
            for problem in exc.problems:  # a source knows the field; the line of bundle.yaml is known here
                if problem.file == BUNDLE_FILE and problem.line is None:
                    problem = replace(problem, line=line_of(lines, tuple(problem.field.split("."))))
                self.problems.append(problem)
            return exc.tasks
        except Exception as exc:
            self.problem(
                BUNDLE_FILE, ("tasks",), f"task source {source_name!r} failed: {type(exc).__name__}: {exc}", lines
            )
            return []

    def _task(self, raw: RawTask, defaults: Mapping[str, Any]) -> Task | None:
        data = raw.data
        if not isinstance(data, dict):
            self.problem(raw.file, (), "a task must be a mapping with id, split, turns", raw.lines)
            return None
        data = {**defaults, **data}
        if "split" not in data or data.get("split") in (None, ""):
            task_name = data.get("id", "?")
            self.problem(
                raw.file,
                ("split",),
                f"task {task_name!r} has no split; add one (split: train or split: eval)",
                raw.lines,
            )
            return None
        try:
            return Task.model_validate(data)
        except ValidationError as exc:
            self._pydantic(exc, raw.file, (), raw.lines)
            return None

    def _check_toolset(
        self,
        task: Task,
        toolset: Toolset,
        envs: Mapping[str, EnvSpec],
        env_tools: Mapping[str, list[Tool] | None],
        file: str,
    ) -> str:
        lines = self._lines_for(file, task)
        effective: dict[str, list[str] | None] = {}
        for i, env_name in enumerate(toolset.envs):
            if env_name not in envs:
                self.problem(
                    file,
                    ("toolset", "envs", i),
                    f"unknown env {env_name!r}; the bundle's envs: {', '.join(sorted(envs)) or 'none'}",
                    lines,
                )
                continue
            env = envs[env_name]
            if env.roles is not None and toolset.role not in env.roles:
                self.problem(
                    file,
                    ("toolset", "role"),
                    f"env {env_name!r} has no role {toolset.role!r}; its roles: {', '.join(sorted(env.roles))}",
                    lines,
                )
                continue
            tools = env_tools.get(env_name)
            effective[env_name] = _effective(env, toolset, tools)
        for change in ("deny", "allow"):
            for env_name, names in getattr(toolset, change).items():
                if env_name not in toolset.envs:
                    self.problem(
                        file,
                        ("toolset", change, env_name),
                        f"env {env_name!r} is not in this toolset's "
                        f"envs ({', '.join(toolset.envs) or 'none'}); add it or drop the change",
                        lines,
                    )
                    continue
                tools = env_tools.get(env_name)
                if tools is None:
                    continue  # only a deploy can tell; checked when an episode starts
                have = {t.name for t in tools}
                for j, tool_name in enumerate(names):
                    if tool_name not in have:
                        self.problem(
                            file,
                            ("toolset", change, env_name, j),
                            f"{change} names tool {tool_name!r}, which env {env_name!r} does not have; "
                            f"its tools: {', '.join(sorted(have))}",
                            lines,
                        )
        seen: dict[str, str] = {}
        for env_name, names in effective.items():
            for tool_name in names or ():
                if tool_name in seen or (toolset.bash and tool_name == BASH_TOOL):
                    other = seen.get(tool_name, "bash: true")
                    self.problem(
                        file,
                        ("toolset", "envs"),
                        f"tool {tool_name!r} is offered by both {other!r} and {env_name!r}; deny it in one of them",
                        lines,
                    )
                seen[tool_name] = env_name
        unknown = any(names is None for names in effective.values())
        canonical = {
            "envs": [envs[n].canonical() for n in toolset.envs if n in envs],
            # the role and the access changes only choose tools: they matter for the key when the
            # tools are not known up front (two roles that end with the same tools share a key)
            "role": toolset.role if unknown else None,
            "tools": effective,
            "changes": {
                n: {"deny": sorted(toolset.deny.get(n, [])), "allow": sorted(toolset.allow.get(n, []))}
                for n, names in effective.items()
                if names is None
            },
            "bash": toolset.bash,
        }
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16]

    def _verifiers(self, task: Task, file: str) -> Iterator[tuple[tuple[str, str], Any]]:
        lines = self._lines_for(file, task)
        kinds = self.plugins.verifier_kinds()
        seen: set[str] = set()
        for t, turn in enumerate(task.turns):
            for v, spec in enumerate(turn.verifiers):
                loc = ("turns", t, "verifiers", v)
                if spec.id in seen:
                    self.problem(
                        file,
                        (*loc, "id"),
                        f"step id {spec.id!r} is used twice in task {task.id!r}; "
                        "give each verifier its own id (answer-1, answer-2)",
                        lines,
                    )
                seen.add(spec.id)
                kind = kinds.get(spec.kind)
                if kind is None:
                    self.problem(
                        file,
                        (*loc, "kind"),
                        f"unknown verifier kind {spec.kind!r}; known: {', '.join(sorted(kinds))}",
                        lines,
                    )
                    continue
                try:
                    yield (task.id, spec.id), kind.build(spec.params, self.root)
                except (ValueError, LookupError, TypeError) as exc:
                    self.problem(file, loc, f"{spec.kind} verifier {spec.id!r}: {exc}", lines)

    def _check_reward(self, task: Task, file: str) -> None:
        lines = self._lines_for(file, task)
        try:
            rule = self.plugins.reward_rule(task.reward.rule)
        except PluginError as exc:
            self.problem(file, ("reward",), str(exc), lines)
            return
        for message in rule.check(task.reward.params, task.step_ids):
            self.problem(file, ("reward",), message, lines)
        if task.solution is not None and len(task.solution) != len(task.turns):
            self.problem(
                file,
                ("solution",),
                f"has {len(task.solution)} turns but the task has {len(task.turns)}; write one solution turn per turn",
                lines,
            )

    def _lines_for(self, file: str, task: Task) -> Lines | None:
        return self._task_lines.get((file, task.id))

    # -- pydantic errors ----------------------------------------------------------------------

    def _pydantic(self, exc: ValidationError, file: str, base: tuple[str | int, ...], lines: Lines | None) -> None:
        for err in exc.errors():
            loc = (*base, *err["loc"])
            kind = err["type"]
            if kind == "missing":
                message = f"missing; add {_dotted(err['loc']) or 'it'}"
                if err["loc"] and err["loc"][-1] == "prompt":
                    message = "missing; every turn needs a prompt"
            elif kind == "extra_forbidden":
                message = "unknown field; remove it or check its spelling"
            elif kind == "too_short":
                message = "is empty; give at least one"
            else:
                message = err["msg"].removeprefix("Value error, ")
            self.problem(file, loc, message, lines)


class _ReadProblems(Exception):
    def __init__(self, problems: list[BundleProblem], tasks: list[RawTask]) -> None:
        super().__init__("; ".join(map(str, problems)))
        self.problems = problems
        self.tasks = tasks


def read_yaml_tasks(config: Any, bundle_dir: Path) -> list[RawTask]:
    """The built-in ``yaml`` task source: glob(s) of YAML files, each one task or a list of tasks."""
    patterns = [config] if isinstance(config, str) else list(config or [])
    problems: list[BundleProblem] = []
    tasks: list[RawTask] = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            problems.append(
                BundleProblem(BUNDLE_FILE, "tasks", f"{pattern!r} is not a glob; write tasks: tasks/*.yaml")
            )
            continue
        matches = sorted(glob.glob(str(bundle_dir / pattern), recursive=True))
        if not matches:
            problems.append(
                BundleProblem(
                    BUNDLE_FILE, "tasks", f"{pattern!r} matches no file in {bundle_dir}; fix the glob or add task files"
                )
            )
        for match in matches:
            path = Path(match)
            shown = str(path.relative_to(bundle_dir))
            try:
                data, lines = read_yaml(path, shown)
            except _SyntaxProblem as exc:
                problems.append(exc.problem)
                continue
            if isinstance(data, list):
                for i, item in enumerate(data):
                    sub = {k[1:]: v for k, v in lines.items() if k and k[0] == i}
                    sub[()] = lines.get((i,), 1)
                    tasks.append(RawTask(item, shown, sub))
            else:
                tasks.append(RawTask(data, shown, lines))
    if problems:
        raise _ReadProblems(problems, tasks)
    return tasks


def _effective(env: EnvSpec, toolset: Toolset, tools: list[Tool] | None) -> list[str] | None:
    """The names of the tools ``toolset`` gets from ``env``, or None when only a deploy can tell."""
    if tools is None:
        return None
    names = [t.name for t in tools]
    role_tools = set(env.roles[toolset.role]) if env.roles is not None else set(names)
    role_tools |= set(toolset.allow.get(env.name, []))
    role_tools -= set(toolset.deny.get(env.name, []))
    return [n for n in names if n in role_tools]


def effective_tools(env: EnvSpec, toolset: Toolset, tools: list[Tool]) -> list[Tool]:
    """Filter an env's tools (as listed by a live instance) down to what ``toolset`` offers."""
    keep = set(_effective(env, toolset, tools) or ())
    return [t for t in tools if t.name in keep]


def _dotted(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
