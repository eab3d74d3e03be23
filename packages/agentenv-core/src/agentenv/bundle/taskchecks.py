"""The checks of one task as the loader reads it: its fields, toolset, frames, verifiers, reward rule and deploy steps.

``TaskChecks`` is the part of ``agentenv.bundle.loader.Loader`` that looks at a task; each problem is told with
``task_problem``, which names the file and line (or the dataset row and column).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from agentenv.bundle.tasksources import RawTask, dotted
from agentenv.bundle.toolsets import check_toolset, effective_tools
from agentenv.env import Tool
from agentenv.errors import PluginError
from agentenv.plugins.records import Problem
from agentenv.specs import BUNDLE_FILE, AgentSpec, EndpointSpec, EnvSpec, RewardSpec, Task, Toolset
from agentenv.wire import MAX_FRAME

if TYPE_CHECKING:
    from agentenv.plugins import Plugins

__all__ = ["MAX_TASK_FRAME", "Loc", "TaskChecks", "column_of", "pydantic_problems", "reward_problems"]

Loc = tuple[str | int, ...]

# The largest frame a task may make the server send (its first prompt with the system prompt and its
# tools; each later prompt): what a client reads (agentenv.wire.MAX_FRAME, 64 MiB), less room for the
# frame's other fields. A task over it would be lost at every start, as the server's fault.
MAX_TASK_FRAME: Final = MAX_FRAME - 64 * 1024
_WORST = 6  # bytes a character may take in a JSON frame (a control character is written \u00XX)


def reward_problems(reward: RewardSpec, task: Task, plugin_set: Plugins) -> list[Problem]:
    """What the rule of ``reward`` finds wrong with its params for ``task`` (paths relative to the reward); empty when
    it fits. An unknown rule raises ``PluginError`` naming the known ones."""
    rule = plugin_set.reward_rule(reward.rule)
    return [Problem.of(found) for found in rule.check(reward.params, task.step_ids)]


class TaskChecks:
    """The checks of a task (mixed into the loader, which reports the problems)."""

    root: Path
    plugins: Plugins
    _toolset_checks: dict[Any, tuple[str, list[tuple[Loc, str]]]]
    _tools_bytes: dict[str, int]  # toolset key -> the bytes its tools take in a started frame
    _key_vars: set[str]  # every endpoint's key_var (deploy steps, judge verifiers): never in a pass_env

    def task_problem(self, raw: RawTask, loc: Loc, message: str) -> None:
        """Tell a problem of the task ``raw`` at ``loc`` (the loader's)."""
        raise NotImplementedError

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
            for loc, message in pydantic_problems(exc):
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
            self._tools_bytes[key] = _tools_bytes(toolset, envs, env_tools)
        for loc, message in checked[1]:
            self.task_problem(raw, loc, message)
        return checked[0]

    def _check_frames(self, task: Task, raw: RawTask, key: str) -> None:
        """Refuse a task whose first frame (system prompt, first prompt, tools) or a later prompt is over what a
        client reads (``MAX_TASK_FRAME``): it would be lost at every start, as the server's fault."""
        for t, turn in enumerate(task.turns):
            text = len(turn.prompt) + (len(task.system) if t == 0 else 0)
            tools = self._tools_bytes.get(key, 0) if t == 0 else 0
            if _WORST * text + tools <= MAX_TASK_FRAME:
                continue  # the common case: no need to measure
            size = _json_bytes(turn.prompt) + (_json_bytes(task.system) if t == 0 else 0) + tools
            if size <= MAX_TASK_FRAME:
                continue
            what = "its first prompt with the system prompt and the tools" if t == 0 else f"turn {t + 1}'s prompt"
            self.task_problem(
                raw,
                ("turns", t, "prompt"),
                f"task {task.id!r} would be sent in a frame of {size / 2**20:.1f} MiB ({what}), over the "
                f"{MAX_TASK_FRAME / 2**20:.1f} MiB a client reads: every start of it would be lost; shorten it, or "
                "keep the long text in a file an env tool reads",
            )

    def _verifiers(self, task: Task, raw: RawTask, toolset: Toolset) -> Iterator[tuple[tuple[str, str], Any]]:
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
                found += _env_outside(spec, toolset)
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
            found = reward_problems(task.reward, task, self.plugins)
        except PluginError as exc:
            self.task_problem(raw, ("reward",), str(exc))
            return
        for problem in found:
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
            if isinstance(step.endpoint, EndpointSpec) and step.endpoint.key_var:
                self._key_vars.add(step.endpoint.key_var)
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
        for turn in task.turns:
            for spec in turn.verifiers:
                endpoint = spec.params.get("endpoint")
                if spec.kind == "judge" and isinstance(endpoint, dict) and isinstance(endpoint.get("key_var"), str):
                    self._key_vars.add(endpoint["key_var"])
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


def _env_outside(spec: Any, toolset: Toolset) -> list[Problem]:
    """A python verifier's ``env:`` that names no env of the task's toolset (found at play otherwise)."""
    env = spec.params.get("env") if spec.kind == "python" else None
    offered = [*toolset.envs, *(["bash"] if toolset.bash else [])]
    if env is None or env in offered:
        return []
    message = f"env {env!r} is not in the task's toolset (its envs: {', '.join(offered) or 'none'}); name one of them"
    return [Problem(("env",), message + ", or add it to toolset.envs")]


def _tools_bytes(toolset: Toolset, envs: Mapping[str, EnvSpec], env_tools: Mapping[str, list[Tool] | None]) -> int:
    """The bytes the toolset's tools take in a started frame (those known before a deploy)."""
    size = 0
    for name in toolset.envs:
        tools = env_tools.get(name)
        if name in envs and tools is not None:
            size += sum(
                len(json.dumps(t.as_dict(), ensure_ascii=False).encode())
                for t in effective_tools(envs[name], toolset, tools)
            )
    return size + (1024 if toolset.bash else 0)  # the bash tool's own description and schema


def _json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())


def pydantic_problems(exc: ValidationError) -> Iterable[tuple[Loc, str]]:
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


def column_of(columns: Mapping[Loc, str], loc: Loc) -> str | None:
    """The column a field (or its nearest parent) came from."""
    while True:
        if loc in columns:
            return columns[loc]
        if not loc:
            return None
        loc = loc[:-1]
