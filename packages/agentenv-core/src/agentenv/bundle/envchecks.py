"""The checks of a bundle's envs and agents as the loader reads bundle.yaml: each spec, its kind and the kind's own
check, the tools an env describes (their argument schemas, its roles), and the variables none may be passed.

``EnvChecks`` is the part of ``agentenv.bundle.loader.Loader`` that looks at ``envs:`` and ``agents:``; each problem is
told with ``problem`` (or ``warn``), which names bundle.yaml's line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import ValidationError

from agentenv.bundle.taskchecks import Loc, pydantic_problems
from agentenv.bundle.yaml_lines import Lines
from agentenv.env import Tool
from agentenv.plugins.records import Problem
from agentenv.schema import check_schema, unknown_keywords
from agentenv.specs import BASH_TOOL, BUNDLE_FILE, AgentSpec, EnvSpec

if TYPE_CHECKING:
    from agentenv.plugins import Plugins

__all__ = ["AGENTS", "ENVS", "EnvChecks", "Section"]

M = TypeVar("M", EnvSpec, AgentSpec)


@dataclass(frozen=True)
class Section(Generic[M]):
    """What differs between bundle.yaml's two kinded sections: the key, what one entry is, its model, its kinds, the
    words of its refusals, and the section's own rules (each a ``Problem`` relative to the spec)."""

    name: str
    what: str
    model: type[M]
    kinds: Callable[[Plugins], Mapping[str, Any]]
    shape: str  # what a spec that is not a mapping is told
    hint: str  # where more kinds come from
    own: Callable[[M], list[Problem]] = lambda _: []


def _bash_named(env: EnvSpec) -> list[Problem]:
    """The env named ``bash`` is the one ``toolset: {bash: true}`` deploys: its kind is bash."""
    if env.name != BASH_TOOL or env.kind == "bash":
        return []
    message = f"the env named {BASH_TOOL!r} is the one toolset bash: true deploys; give it kind: bash"
    return [Problem(("kind",), message + " or give this env another name")]


ENVS: Section[EnvSpec] = Section(
    "envs",
    "env",
    EnvSpec,
    lambda plugin_set: plugin_set.env_kinds(),
    "must be a mapping (kind, target, config)",
    "agentenv-docker has 'container'",
    _bash_named,
)
AGENTS: Section[AgentSpec] = Section(
    "agents",
    "agent",
    AgentSpec,
    lambda plugin_set: plugin_set.agent_kinds(),
    "must be a mapping (kind and the kind's fields)",
    "agentenv-harness has coding-agent CLIs",
)


class EnvChecks:
    """The checks of the envs and agents (mixed into the loader, which reports the problems)."""

    root: Path
    plugins: Plugins
    _schemas_told: set[tuple[str, str]]
    _key_vars: set[str]

    def problem(self, file: str, loc: Loc, message: str, lines: Lines | None = None) -> None:
        """Tell a problem at ``loc`` of ``file`` (the loader's)."""
        raise NotImplementedError

    def warn(self, file: str, loc: Loc, message: str, lines: Lines) -> None:
        """Tell a warning at ``loc`` of ``file`` (the loader's)."""
        raise NotImplementedError

    def _check_pass_env(self, envs: Mapping[str, EnvSpec], agents: Mapping[str, AgentSpec], lines: Lines) -> None:
        """No env or agent may be passed a variable an endpoint's key is read from."""
        from agentenv.sandbox.environ import keep_secret

        keep_secret(*self._key_vars)
        for section, specs in (("envs", envs), ("agents", agents)):
            for name, spec in specs.items():
                for i, var in enumerate(spec.pass_env):
                    if var in self._key_vars:
                        message = (
                            f"{var} holds an endpoint's key (a key_var of this bundle); a program the policy steers "
                            "is never passed it: remove it"
                        )
                        self.problem(BUNDLE_FILE, (section, name, "pass_env", i), message, lines)

    def _kinded(self, section: Section[M], raw: Any, lines: Lines) -> tuple[dict[str, M], set[str]]:
        """The specs of a kinded section (``envs:`` or ``agents:``) by name, each checked by its kind, and the names of
        those their kind refused. Those are kept too, so that what names them is not refused for that as well."""
        out: dict[str, M] = {}
        refused: set[str] = set()
        if not isinstance(raw, dict):
            self.problem(BUNDLE_FILE, (section.name,), f"must map {section.what} names to their specs", lines)
            return out, refused
        kinds = section.kinds(self.plugins)
        for name, spec in raw.items():
            loc: Loc = (section.name, name)
            if not isinstance(spec, dict):
                self.problem(BUNDLE_FILE, loc, section.shape, lines)
                continue
            try:
                parsed = section.model.model_validate({**spec, "name": str(name)})
            except ValidationError as exc:
                for sub, message in pydantic_problems(exc):
                    self.problem(BUNDLE_FILE, (*loc, *sub), message, lines)
                continue
            kind = kinds.get(parsed.kind)
            if kind is None:
                fix = f"known: {', '.join(sorted(kinds))} (or install the plugin that provides it; {section.hint})"
                self.problem(BUNDLE_FILE, (*loc, "kind"), f"unknown {section.what} kind {parsed.kind!r}; {fix}", lines)
                continue
            for problem in section.own(parsed):
                self.problem(BUNDLE_FILE, (*loc, *problem.path), problem.message, lines)
            if self._kind_check(section.what, kind, parsed, loc, lines):
                refused.add(parsed.name)
            out[parsed.name] = parsed
        return out, refused

    def _kind_check(self, what: str, kind: Any, spec: Any, loc: Loc, lines: Lines) -> bool:
        """Tell the problems the kind's own ``check`` finds in ``spec``, each at its field's line; whether any."""
        try:
            found = [Problem.of(p) for p in kind.check(spec, self.root)]
        except Exception as exc:  # a plugin's check that breaks is said at the spec, not raised
            found = [Problem((), f"{what} kind {spec.kind!r} could not check it: {type(exc).__name__}: {exc}")]
        for problem in found:
            self.problem(BUNDLE_FILE, (*loc, *problem.path), problem.message, lines)
        return bool(found)

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
                continue
            for unknown in unknown_keywords(tool.parameters):  # valid, and ignored: the arguments go unchecked
                self.warn(BUNDLE_FILE, loc, f"tool {tool.name!r} of {origin}: its argument schema, {unknown}", lines)
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
