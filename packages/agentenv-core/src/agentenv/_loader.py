"""``load_bundle``'s reader: bundle.yaml, the envs and their tools, then every task, checked as it streams in.

Loading is linear in the number of tasks: a task is validated and checked when its source yields it,
work that tasks share (a toolset's check and key, a reward rule) is done once per distinct value, and
line numbers are looked up only for a task that has a problem.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError

from ._yaml import Lines, SyntaxProblem, line_of, read_yaml
from .env import Tool
from .errors import BundleError, BundleProblem, PluginError
from .records import Problem
from .schema import check_schema
from .specs import BUNDLE_FILE, AgentSpec, BundleFile, DeployStep, EnvSpec, RawTask, RewardSpec, Task, Toolset
from .tasksources import dotted, row_field, undotted
from .toolsets import check_toolset

if TYPE_CHECKING:
    from .plugins import Plugins

# A refusal lists this many problems; a 100,000-task bundle with one mistake in its template would
# otherwise print 100,000 lines that say the same thing.
MAX_LISTED = 200

Loc = tuple[str | int, ...]
B = TypeVar("B")


class Loader:
    """One load of one bundle: ``load(Bundle)`` returns it, or raises ``BundleError`` listing every problem."""

    def __init__(self, path: Path, plugin_set: Plugins) -> None:
        self.root = path.parent if path.is_file() else path
        self.plugins = plugin_set
        self.problems: list[BundleProblem] = []
        self.unlisted = 0
        self._toolset_checks: dict[Any, tuple[str, list[tuple[Loc, str]]]] = {}
        self._schemas_told: set[tuple[str, str]] = set()
        self._refused_envs: set[str] = set()

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

    def task_problem(self, raw: RawTask, loc: Loc, message: str) -> None:
        """A problem of a task, named by file and line, or by file, row and column for a dataset row."""
        if raw.row is None:
            self.problem(raw.file, loc, message, raw.lines)
            return
        column = _column_of(raw.columns, loc)
        self._add(BundleProblem(raw.file, row_field(raw.row, column, loc), message, raw.lines.get(())))

    def refuse(self, name: str) -> BundleError:
        problems = list(self.problems)
        if self.unlisted:
            problems.append(
                BundleProblem(f"(+{self.unlisted} more problems)", "", "not listed; fix the ones above and load again")
            )
        return BundleError(name, problems)

    # -- the bundle ---------------------------------------------------------------------------

    def load(self, make: Callable[..., B]) -> B:
        # A load builds millions of objects and frees almost none: the cycle collector would walk all of
        # them again and again (three times the work at 100,000 tasks). It runs again after the load.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._load(make)
        finally:
            if was_enabled:
                gc.enable()

    def _load(self, make: Callable[..., B]) -> B:
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
        envs = self._envs(data.get("envs") or {}, lines)
        agents = self._agents(data.get("agents") or {}, lines)
        # an env its kind refused is not asked for its tools: that would tell the same problem again
        env_tools = {
            env.name: None if env.name in self._refused_envs else self._describe(env, lines) for env in envs.values()
        }
        defaults = self._defaults(data.get("defaults") or {}, lines)
        declared = data.get("splits")
        if declared is not None and (not isinstance(declared, list) or not all(isinstance(s, str) for s in declared)):
            self.problem(BUNDLE_FILE, ("splits",), "must be a list of split names (splits: [train, eval])", lines)
            declared = None
        declared_set = set(declared or ())
        tasks: list[Task] = []
        where: dict[str, str] = {}  # task id -> where it was read (for a duplicate)
        toolsets: dict[str, Toolset] = {}
        keys: dict[str, str] = {}
        verifiers: dict[tuple[str, str], Any] = {}
        for raw in self._raw_tasks(data.get("tasks"), lines):
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
            verifiers.update(self._verifiers(task, raw))
            self._check_reward(task, raw)
            self._check_deploy(task, raw, agents)
            if declared is not None and task.split not in declared_set:
                self.task_problem(
                    raw,
                    ("split",),
                    f"split {task.split!r} is not one of the bundle's splits ({', '.join(declared)}); use one of "
                    f"them or add it to splits in {BUNDLE_FILE}",
                )
        if not tasks and not self.problems:
            self.problem(BUNDLE_FILE, ("tasks",), "no tasks found; check the glob (tasks: tasks/*.yaml)", lines)
        if self.problems:
            raise self.refuse(name)
        return make(
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
                    for loc, message in _pydantic(exc):
                        self.problem(BUNDLE_FILE, ("defaults", key, *loc), message, lines)
                    del defaults[key]
        return defaults

    # -- envs and agents ----------------------------------------------------------------------

    def _envs(self, raw: Any, lines: Lines) -> dict[str, EnvSpec]:
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, ("envs",), "must map env names to their specs", lines)
            return {}
        kinds = self.plugins.env_kinds()
        out: dict[str, EnvSpec] = {}
        for name, spec in raw.items():
            loc: Loc = ("envs", name)
            if not isinstance(spec, dict):
                self.problem(BUNDLE_FILE, loc, "must be a mapping (kind, target, config)", lines)
                continue
            try:
                env = EnvSpec.model_validate({**spec, "name": str(name)})
            except ValidationError as exc:
                for sub, message in _pydantic(exc):
                    self.problem(BUNDLE_FILE, (*loc, *sub), message, lines)
                continue
            kind = kinds.get(env.kind)
            if kind is None:
                known = ", ".join(sorted(kinds))
                fix = f"known: {known} (or install the plugin that provides it)"
                self.problem(BUNDLE_FILE, (*loc, "kind"), f"unknown env kind {env.kind!r}; {fix}", lines)
                continue
            try:
                found = [Problem.of(p) for p in kind.check(env, self.root)]
            except Exception as exc:  # a plugin's check that breaks is said at the env, not raised
                found = [Problem((), f"env kind {env.kind!r} could not check it: {type(exc).__name__}: {exc}")]
            for problem in found:  # each at its own field's line
                self.problem(BUNDLE_FILE, (*loc, *problem.path), problem.message, lines)
            if found:
                self._refused_envs.add(env.name)
            out[env.name] = env  # kept, so that the toolsets naming it are not refused for that too
        return out

    def _agents(self, raw: Any, lines: Lines) -> dict[str, AgentSpec]:
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, ("agents",), "must map agent names to their specs", lines)
            return {}
        kinds = self.plugins.agent_kinds()
        out = {}
        for name, spec in raw.items():
            loc: Loc = ("agents", name)
            if not isinstance(spec, dict):
                self.problem(BUNDLE_FILE, loc, "must be a mapping (kind and the kind's fields)", lines)
                continue
            try:
                agent = AgentSpec.model_validate({**spec, "name": str(name)})
            except ValidationError as exc:
                for sub, message in _pydantic(exc):
                    self.problem(BUNDLE_FILE, (*loc, *sub), message, lines)
                continue
            kind = kinds.get(agent.kind)
            if kind is None:
                known = ", ".join(sorted(kinds))
                fix = f"known: {known} (or install the plugin that provides it; agentenv-harness has coding-agent CLIs)"
                self.problem(BUNDLE_FILE, (*loc, "kind"), f"unknown agent kind {agent.kind!r}; {fix}", lines)
                continue
            try:
                found = [Problem.of(p) for p in kind.check(agent, self.root)]
            except Exception as exc:  # a plugin's check that breaks is said at the agent, not raised
                found = [Problem((), f"agent kind {agent.kind!r} could not check it: {type(exc).__name__}: {exc}")]
            for problem in found:
                self.problem(BUNDLE_FILE, (*loc, *problem.path), problem.message, lines)
            out[agent.name] = agent
        return out

    def _describe(self, env: EnvSpec, lines: Lines) -> list[Tool] | None:
        loc: Loc = ("envs", env.name)
        try:
            tools = self.plugins.env_kinds()[env.kind].describe(env, self.root)
        except Exception as exc:
            self.problem(BUNDLE_FILE, loc, f"cannot list its tools: {type(exc).__name__}: {exc}", lines)
            return None
        if tools is None:
            return None
        origin = env.target or (" ".join(env.command) if env.command else env.kind)
        for tool in tools:
            if (origin, tool.name) in self._schemas_told:
                continue  # several envs may run one class: its mistake is told once, at the first
            self._schemas_told.add((origin, tool.name))
            wrong = check_schema(tool.parameters)
            if wrong is not None:
                self.problem(
                    BUNDLE_FILE,
                    loc,
                    f"tool {tool.name!r} of {origin} has an invalid JSON Schema for its arguments, {wrong}",
                    lines,
                )
        if env.roles:
            names = {t.name for t in tools}
            for role, allowed in env.roles.items():
                for i, tool_name in enumerate(allowed):
                    if tool_name not in names:
                        self.problem(
                            BUNDLE_FILE,
                            (*loc, "roles", role, i),
                            f"role {role!r} names tool {tool_name!r}, which env {env.name!r} does not "
                            f"have; its tools: {', '.join(sorted(names))}",
                            lines,
                        )
        return tools

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

    def _task(self, raw: RawTask, defaults: Mapping[str, Any]) -> Task | None:
        data = raw.data
        if not isinstance(data, dict):
            self.task_problem(raw, (), "a task must be a mapping with id, split, turns")
            return None
        data = {**defaults, **data}
        if data.get("split") in (None, ""):
            message = f"task {data.get('id', '?')!r} has no split; add one (split: train or split: eval)"
            self.task_problem(raw, ("split",), message)
            return None
        try:
            return Task.model_validate(data)
        except ValidationError as exc:
            for loc, message in _pydantic(exc):
                self.task_problem(raw, loc, message)
            return None

    def _toolset_key(
        self, raw: RawTask, toolset: Toolset, envs: Mapping[str, EnvSpec], env_tools: Mapping[str, list[Tool] | None]
    ) -> str:
        """The toolset's key; its check runs once per distinct toolset, its problems are told per task."""
        shape = (
            tuple(toolset.envs),
            toolset.role,
            tuple((k, tuple(v)) for k, v in sorted(toolset.deny.items())),
            tuple((k, tuple(v)) for k, v in sorted(toolset.allow.items())),
            toolset.bash,
        )
        checked = self._toolset_checks.get(shape)
        if checked is None:
            problems: list[tuple[Loc, str]] = []
            key = check_toolset(toolset, envs, env_tools, problems)
            checked = self._toolset_checks[shape] = (key, problems)
        for loc, message in checked[1]:
            self.task_problem(raw, loc, message)
        return checked[0]

    def _verifiers(self, task: Task, raw: RawTask) -> Iterator[tuple[tuple[str, str], Any]]:
        kinds = self.plugins.verifier_kinds()
        seen: set[str] = set()
        for t, turn in enumerate(task.turns):
            for v, spec in enumerate(turn.verifiers):
                loc = ("turns", t, "verifiers", v)
                if spec.id in seen:
                    self.task_problem(
                        raw,
                        (*loc, "id"),
                        f"step id {spec.id!r} is used twice in task {task.id!r}; "
                        "give each verifier its own id (answer-1, answer-2)",
                    )
                seen.add(spec.id)
                kind = kinds.get(spec.kind)
                if kind is None:
                    known = ", ".join(sorted(kinds))
                    self.task_problem(raw, (*loc, "kind"), f"unknown verifier kind {spec.kind!r}; known: {known}")
                    continue
                said = f"{spec.kind} verifier {spec.id!r}"
                try:
                    found = [Problem.of(p) for p in kind.check(spec.params, self.root)]
                except Exception as exc:  # a plugin's check that breaks is said at the verifier, not raised
                    found = [Problem((), f"its kind could not check it: {type(exc).__name__}: {exc}")]
                for problem in found:  # each at its own field's line
                    self.task_problem(raw, (*loc, *problem.path), f"{said}: {problem.message}")
                if found:
                    continue
                try:
                    yield (task.id, spec.id), kind.build(spec.params, self.root)
                except (ValueError, LookupError, TypeError) as exc:
                    self.task_problem(raw, loc, f"{said}: {exc}")

    def _check_reward(self, task: Task, raw: RawTask) -> None:
        try:
            rule = self.plugins.reward_rule(task.reward.rule)
        except PluginError as exc:
            self.task_problem(raw, ("reward",), str(exc))
            return
        for found in rule.check(task.reward.params, task.step_ids):
            problem = Problem.of(found)
            self.task_problem(raw, ("reward", *problem.path), problem.message)
        if task.solution is not None and len(task.solution) != len(task.turns):
            self.task_problem(
                raw,
                ("solution",),
                f"has {len(task.solution)} turns but the task has {len(task.turns)}; write one solution turn per turn",
            )

    def _check_deploy(self, task: Task, raw: RawTask, agents: Mapping[str, AgentSpec]) -> None:
        """A task's deploy steps: each names a known agent (a judge step none), one step per role."""
        seen: set[str] = set()
        for i, step in enumerate(task.deploy):
            loc: Loc = ("deploy", i)
            if step.role in seen:
                self.task_problem(raw, (*loc, "role"), f"a second {step.role} step; a task deploys one agent per role")
            seen.add(step.role)
            if step.role == "judge":
                if step.agent is not None:
                    self.task_problem(
                        raw,
                        (*loc, "agent"),
                        "a judge step deploys no agent: it names the endpoint the task's judge verifiers ask; "
                        "remove agent",
                    )
                continue
            if step.agent is None:
                known = ", ".join(sorted(agents)) or "none yet; add agents: to bundle.yaml"
                self.task_problem(raw, (*loc, "agent"), f"missing; name the {step.role} agent (known: {known})")
            elif step.agent not in agents:
                known = ", ".join(sorted(agents)) or "none; add agents: to bundle.yaml"
                self.task_problem(
                    raw, (*loc, "agent"), f"agent {step.agent!r} is not in agents: of {BUNDLE_FILE}; known: {known}"
                )
        if task.deployed("judge") is not None:
            return
        for t, turn in enumerate(task.turns):
            for v, spec in enumerate(turn.verifiers):
                if spec.kind == "judge" and "endpoint" not in spec.params:
                    self.task_problem(
                        raw,
                        ("turns", t, "verifiers", v),
                        f"judge verifier {spec.id!r} has no endpoint and task {task.id!r} deploys no judge; give it "
                        "endpoint: {base_url, model, key_var} or add the deploy step {role: judge, endpoint: ...}",
                    )


# the defaults validated once (a task's own fields are validated with the task)
_DEFAULT_MODELS: Final[dict[str, TypeAdapter[Any]]] = {
    "toolset": TypeAdapter(Toolset),
    "reward": TypeAdapter(RewardSpec),
    "deploy": TypeAdapter(list[DeployStep]),
}


def _pydantic(exc: ValidationError) -> Iterable[tuple[Loc, str]]:
    """Each of pydantic's errors as (field path, message with the fix)."""
    for err in exc.errors():
        loc = tuple(err["loc"])
        kind = err["type"]
        if kind == "missing":
            message = f"missing; add {dotted(loc) or 'it'}"
            if loc and loc[-1] == "prompt":
                message = "missing; every turn needs a prompt"
        elif kind == "extra_forbidden":
            message = "unknown field; remove it or check its spelling"
        elif kind == "too_short":
            message = "is empty; give at least one"
        else:
            message = err["msg"].removeprefix("Value error, ")
        yield loc, message


def _column_of(columns: Mapping[Loc, str], loc: Loc) -> str | None:
    """The column a field (or its nearest parent) came from."""
    while True:
        if loc in columns:
            return columns[loc]
        if not loc:
            return None
        loc = loc[:-1]
