"""The typed records agentenv's registration hooks yield, and the problems a kind's ``check`` returns.

Each record carries a ``name``; two plugins registering one name is a problem that leaves the later
plugin out (a built-in name is never given up). The callables a record holds receive the types named
in their docs: ``agentenv.EnvSpec``, ``agentenv.Task``, ``agentenv.Toolset``, ``agentenv.Check``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata as md
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentenv.env import Tool
    from agentenv.launch import AgentRequest, Launch
    from agentenv.sandboxing import SandboxBackend
    from agentenv.specs import AgentSpec, EnvSpec, Task
    from agentenv.wire import Purpose

__all__ = [
    "AgentKind",
    "CliCommand",
    "EnvKind",
    "Integration",
    "ObservedEpisode",
    "Problem",
    "RewardRule",
    "Sandbox",
    "TaskSource",
    "VerifierKind",
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with what a kind checks: the field it is about and what to do.

    ``path`` is the field's keys relative to what was checked (an env's spec, a verifier's fields,
    a task's ``reward``): ``("config", "fixture")``; ``()`` means the whole of it. A bundle
    refusal then names the file, the field and the field's line.
    """

    path: tuple[str | int, ...]
    message: str

    def __str__(self) -> str:
        where = ".".join(str(p) for p in self.path)
        return f"{where}: {self.message}" if where else self.message

    @classmethod
    def of(cls, found: Problem | str) -> Problem:
        """A problem as a kind returned it: a plain string is about the whole of what was checked."""
        return found if isinstance(found, Problem) else cls((), str(found))


class ObservedEpisode(Protocol):
    """What an observer may rely on of the episode it gets: an ``agentenv.Episode``.

    ``purpose`` says why it is played: ``"play"`` (a policy plays it), ``"check"`` (``agentenv check``
    deploys it) or ``"probe"`` (a client lists its toolset's tools).
    """

    episode_id: str
    task: Task
    purpose: Purpose
    turn: int  # the open turn (0-based); after the last turn, the number of turns
    tools: list[Tool]  # what the model was offered (empty when the envs could not be created)


def _no_problems(*args: Any) -> list[Problem]:
    return []


@dataclass(frozen=True)
class EnvKind:
    """An env kind (``kind:`` of an env in bundle.yaml).

    ``create(spec, bundle_dir)`` returns a new, undeployed env instance (see ``agentenv.Env``); it
    runs once per episode. ``describe(spec, bundle_dir)`` returns the tools known before any
    episode, or None when only a deploy can tell. ``check(spec, bundle_dir)`` returns what is wrong
    with the spec as ``Problem`` records (paths relative to the env's spec, e.g. ``("config",
    "fixture")``) or strings (about the env as a whole), each naming the fix; empty when fine.
    ``spec`` is an ``agentenv.EnvSpec``: ``name``, ``kind``, ``target``, ``command``, ``config``,
    ``roles``, and ``options`` (the fields only this kind knows).
    """

    name: str
    create: Callable[[EnvSpec, Path], Any]
    describe: Callable[[EnvSpec, Path], list[Tool] | None] = lambda spec, bundle_dir: None
    check: Callable[[EnvSpec, Path], Iterable[Problem | str]] = _no_problems


@dataclass(frozen=True)
class VerifierKind:
    """A verifier kind (``kind:`` of a verifier in a task's turn).

    ``check(params, bundle_dir)`` gets the verifier's fields other than ``id`` and ``kind`` and
    returns what is wrong with them as ``Problem`` records (paths relative to the verifier, e.g.
    ``("pattern",)``) or strings; ``build`` is called only when there are none. ``build(params,
    bundle_dir)`` returns ``verify(check: agentenv.Check) -> float | bool | None`` (None: no
    verdict). ``verify`` may be an ``async def`` function (or an object whose ``__call__`` is one):
    it then runs on the event loop; a plain function runs in a worker thread, so it may block. A
    ``ValueError``, ``LookupError`` or ``TypeError`` from ``build`` refuses the bundle at the
    verifier's line.
    """

    name: str
    build: Callable[[Mapping[str, Any], Path], Callable[..., Any]]
    check: Callable[[Mapping[str, Any], Path], Iterable[Problem | str]] = _no_problems


def _runs_anywhere(spec: AgentSpec, bundle_dir: Path) -> str | None:
    return None


@dataclass(frozen=True)
class AgentKind:
    """An agent kind (``kind:`` of an agent in bundle.yaml's ``agents:``).

    ``launch(request)`` gets an ``agentenv.engine.agents.AgentRequest`` (the agent's spec, its role, the turn's
    prompt, its endpoint, the episode's MCP server, its folders) and returns the ``agentenv.engine.agents.Launch``
    of one run: argv, environment, files, where the reply is read. ``check(spec, bundle_dir)`` returns what
    is wrong with the spec (an ``agentenv.AgentSpec``: ``name``, ``kind`` and the kind's ``options``) as
    ``Problem`` records or strings; the bundle is then refused. ``missing(spec, bundle_dir)`` says why the
    agent cannot run on this machine (an executable not installed), or None: a trainer leaves the tasks
    that deploy it out rather than refusing the bundle. ``dialect`` is the API it speaks (``openai`` or
    ``anthropic``); ``mcp`` whether it takes the episode's tools over MCP.
    """

    name: str
    launch: Callable[[AgentRequest], Launch]
    check: Callable[[AgentSpec, Path], Iterable[Problem | str]] = _no_problems
    missing: Callable[[AgentSpec, Path], str | None] = _runs_anywhere
    dialect: str = "openai"
    mcp: bool = True


@dataclass(frozen=True)
class Sandbox:
    """A sandbox backend (``agentenv serve --sandbox NAME``, ``$AGENTENV_SANDBOX``): what runs the programs the
    policy steers (``bash`` commands, subprocess env programs, agents) apart from the host.

    ``create()`` returns an ``agentenv.sandbox.SandboxBackend``; it is called once per process when the backend is
    first chosen, and once more if an agent names it (``agents.NAME.sandbox.backend``). ``summary`` is one line for
    ``agentenv plugins``.
    """

    name: str
    create: Callable[[], SandboxBackend]
    summary: str = ""


@dataclass(frozen=True)
class TaskSource:
    """Where a bundle's tasks come from (``tasks: {source: NAME, ...}`` in bundle.yaml).

    ``read(config, bundle_dir)`` yields ``agentenv.bundle.RawTask`` records (the task's data and the
    file and lines, or row and columns, to name in errors), and an ``agentenv.errors.BundleProblem``
    for each thing it cannot read. It may be a generator: each task is checked as it comes.
    """

    name: str
    read: Callable[[Any, Path], Iterable[Any]]


@dataclass(frozen=True)
class RewardRule:
    """A reward rule: turns a task's scores (by step id, in turn order) into one reward.

    ``combine(scores, params)`` returns the reward. ``check(params, step_ids)`` returns what is wrong
    with ``params`` for a task with those step ids, as ``Problem`` records (paths relative to the
    task's ``reward``) or strings; empty when fine.
    """

    name: str
    combine: Callable[[Mapping[str, float], Mapping[str, Any]], float]
    check: Callable[[Mapping[str, Any], Sequence[str]], Iterable[Problem | str]] = _no_problems


@dataclass(frozen=True)
class CliCommand:
    """A subcommand of the ``agentenv`` CLI.

    ``configure(parser)`` adds its arguments; ``run(args)`` returns the exit code. An
    ``agentenv.AgentEnvError`` raised by ``run`` is printed as ``error: MESSAGE`` on stderr and
    exits 2 (say what happened and the fix in the message); Ctrl-C exits 130. Print tables with
    ``agentenv.cli.table``.
    """

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# The order a range reads best in: lower bounds, then exact or excluded versions, then upper bounds.
_OPERATOR_ORDER = {">=": 0, ">": 0, "~=": 1, "==": 1, "===": 1, "!=": 2, "<=": 3, "<": 3}


@dataclass(frozen=True)
class Integration:
    """A trainer integration: a distribution of its own whose extra declares the trainer range it supports.

    The range is declared once, in the integration's ``pyproject.toml``
    (``[project.optional-dependencies] trl = ["trl>=1.16.0,<1.17"]``, or in ``dependencies`` for a
    library the integration always needs), and read here from the installed metadata of ``package``:
    ``package`` is the integration's distribution
    (``agentenv-trl``), ``trainer`` the trainer's (``trl``), ``extra`` the extra that declares it
    (default: ``name``). ``offers`` maps what the integration provides to import paths
    (``{"agent_loop": "agentenv_verl.loop:AgentEnvAgentLoop"}``).
    """

    name: str
    package: str
    trainer: str
    extra: str = ""
    offers: Mapping[str, str] = field(default_factory=dict)

    @property
    def requirement(self) -> str:
        """The supported range with the trainer's name, as declared (``"trl>=1.16.0,<1.17"``).

        Raises ``LookupError`` naming the fix when ``package`` is not installed or its extra does
        not name the trainer.
        """
        return _requirement(self.package, self.extra or self.name, self.trainer)

    @property
    def supported(self) -> str:
        """The supported range, without the name (``">=1.16.0,<1.17"``)."""
        return self.requirement.removeprefix(self.trainer)

    @property
    def install(self) -> str:
        """The command that installs the integration with its supported trainer."""
        return f"pip install '{self.package}[{self.extra or self.name}]'"

    def module_attributes(self, module: str) -> Callable[[str], str]:
        """A ``__getattr__`` for ``module`` (the integration's own record module): ``SUPPORTED`` is ``requirement``
        and ``INSTALL`` is ``install``, read on first use (every ``agentenv`` command imports the plugin)."""

        def __getattr__(name: str) -> str:
            if name == "SUPPORTED":
                return self.requirement
            if name == "INSTALL":
                return self.install
            raise AttributeError(f"module {module!r} has no attribute {name!r}")

        return __getattr__

    def installed_version(self) -> str | None:
        """The trainer's installed version, or None when it is not installed."""
        try:
            return md.version(self.trainer)
        except md.PackageNotFoundError:
            return None

    def check(self, version: str | None = None, *, why: str = "") -> str:
        """Return the installed trainer version (or ``version``) when it is in the supported range.

        Otherwise raise ``ImportError`` naming both versions and the fix. ``why`` says what needs
        the trainer (default: ``"{package} needs {trainer}"``). Reads distribution metadata only:
        the trainer is not imported, so call this before importing it.
        """
        from packaging.specifiers import SpecifierSet  # here: every CLI run loads the integrations

        requirement = self.requirement
        if version is None:
            version = self.installed_version()
            if version is None:
                need = why or f"{self.package} needs {self.trainer}"
                raise ImportError(f"{need} ({requirement}), which is not installed: {self.install}")
        if not SpecifierSet(self.supported).contains(version, prereleases=True):
            raise ImportError(
                f"{self.package} supports {requirement}, but {self.trainer} {version} is installed: "
                f"pip install '{requirement}' (or {self.install})"
            )
        return version


@functools.cache
def _requirement(package: str, extra: str, trainer: str) -> str:
    from packaging.markers import UndefinedEnvironmentName
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    fix = f"declare the range once in {package}'s pyproject.toml: [project.optional-dependencies] {extra} = "
    fix += f'["{trainer}>=X,<Y"]'
    try:
        declared = md.requires(package) or []
    except md.PackageNotFoundError:
        raise LookupError(f"{package} is not installed, so its supported {trainer} range is unknown: {fix}") from None
    always = None  # a trainer the package always needs declares its range in the dependencies
    for text in declared:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) != canonicalize_name(trainer):
            continue
        if requirement.marker is None:
            always = requirement
            continue
        try:
            in_extra = requirement.marker.evaluate({"extra": extra})
        except UndefinedEnvironmentName:
            continue
        if in_extra:
            return _range(trainer, requirement)
    if always is not None:
        return _range(trainer, always)
    raise LookupError(f"{package}'s extra {extra!r} does not name {trainer}: {fix}")


def _range(trainer: str, requirement: Any) -> str:
    specs = sorted(requirement.specifier, key=lambda s: (_OPERATOR_ORDER.get(s.operator, 1), s.version))
    return trainer + ",".join(str(s) for s in specs)
