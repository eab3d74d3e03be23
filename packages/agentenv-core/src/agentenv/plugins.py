"""agentenv's plugin system: hookspecs grouped by domain, typed records, and the manager.

A plugin is a module with ``@agentenv.plugins.hookimpl`` functions, announced by an entry point in
the ``agentenv`` group::

    [project.entry-points.agentenv]
    mykinds = "mypackage.agentenv_plugin"

Registration hooks yield typed records that carry a ``name``; two plugins registering one name
is an error naming both. A plugin that fails to import is reported by name and the others load.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import importlib.metadata as md
import importlib.util
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pluggy

from .errors import PluginError

if TYPE_CHECKING:
    from .bundle import EnvSpec, Task, Toolset
    from .env import Tool
    from .episode import Episode, EpisodeResult

__all__ = [
    "NAME",
    "CliCommand",
    "EnvKind",
    "Integration",
    "PluginInfo",
    "PluginLoadError",
    "Plugins",
    "RewardRule",
    "TaskSource",
    "VerifierKind",
    "check_trainer",
    "hookimpl",
    "hookspec",
    "plugins",
]

NAME: Final[str] = "agentenv"
hookspec: Final = pluggy.HookspecMarker(NAME)
hookimpl: Final = pluggy.HookimplMarker(NAME)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Records the registration hooks yield
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvKind:
    """An env kind (``kind:`` of an env in bundle.yaml).

    ``create(spec, bundle_dir)`` returns a new, undeployed env instance (see ``agentenv.env``).
    ``describe(spec, bundle_dir)`` returns the tools known before any episode, or None when only a
    deploy can tell. ``check(spec, bundle_dir)`` returns what is wrong with the spec, each message
    naming the fix (empty when fine).
    """

    name: str
    create: Callable[[EnvSpec, Path], Any]
    describe: Callable[[EnvSpec, Path], list[Tool] | None] = lambda spec, bundle_dir: None
    check: Callable[[EnvSpec, Path], list[str]] = lambda spec, bundle_dir: []


@dataclass(frozen=True)
class VerifierKind:
    """A verifier kind (``kind:`` of a verifier in a task's turn).

    ``build(params, bundle_dir)`` gets the verifier's fields other than ``id`` and ``kind`` and returns
    a callable ``verify(check: agentenv.verifiers.Check) -> float | bool | None`` (may be async;
    None means no verdict). It raises ``ValueError`` naming the field for bad params.
    """

    name: str
    build: Callable[[Mapping[str, Any], Path], Callable[..., Any]]


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
    with ``params`` for a task with those step ids (empty when fine).
    """

    name: str
    combine: Callable[[Mapping[str, float], Mapping[str, Any]], float]
    check: Callable[[Mapping[str, Any], Sequence[str]], list[str]] = lambda params, step_ids: []


@dataclass(frozen=True)
class Integration:
    """A trainer integration: its name, the trainer's distribution, the supported range, what it offers.

    ``supported`` is a PEP 440 specifier set (``">=0.9.1,<0.10"``); ``offers`` maps what the
    integration provides to import paths (``{"agent_loop": "agentenv_verl.loop:AgentEnvAgentLoop"}``).
    """

    name: str
    distribution: str
    supported: str
    offers: Mapping[str, str] = field(default_factory=dict)

    def installed_version(self) -> str | None:
        """The trainer's installed version, or None when it is not installed."""
        try:
            return md.version(self.distribution)
        except md.PackageNotFoundError:
            return None

    def fits(self, version: str | None = None) -> bool | None:
        """Whether ``version`` (default: the installed one) is in the supported range; None if absent."""
        from packaging.specifiers import SpecifierSet

        version = version if version is not None else self.installed_version()
        if version is None:
            return None
        return SpecifierSet(self.supported).contains(version, prereleases=True)


@dataclass(frozen=True)
class CliCommand:
    """A subcommand of the ``agentenv`` CLI: ``configure`` adds its arguments, ``run`` returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------------------------
# Hookspecs, by domain
# --------------------------------------------------------------------------------------------


class TaskSpecs:
    """Hooks that define what a bundle can contain: env kinds, verifier kinds, task sources."""

    @hookspec
    def agentenv_env_kinds(self) -> Iterable[EnvKind]:
        """Register env kinds.

        What for: let bundles use ``kind: NAME`` for an env (a container, a remote sandbox...).

        Parameters: none.

        Returns: an iterable of ``EnvKind`` records. A name registered twice is an error naming
        both plugins.

        Example::

            @hookimpl
            def agentenv_env_kinds():
                yield EnvKind(name="sqlite", create=lambda spec, bundle_dir: SqliteEnv(spec.config, bundle_dir))
        """
        raise NotImplementedError

    @hookspec
    def agentenv_verifier_kinds(self) -> Iterable[VerifierKind]:
        """Register verifier kinds.

        What for: let tasks score a turn with ``kind: NAME`` (a unit-test runner, a rubric judge...).

        Parameters: none.

        Returns: an iterable of ``VerifierKind`` records.

        Example::

            @hookimpl
            def agentenv_verifier_kinds():
                def build(params, bundle_dir):
                    n = int(params["max_words"])
                    return lambda check: float(len(check.reply.split()) <= n)
                yield VerifierKind(name="short", build=build)
        """
        raise NotImplementedError

    @hookspec
    def agentenv_task_sources(self) -> Iterable[TaskSource]:
        """Register task sources.

        What for: read a bundle's tasks from somewhere other than YAML files
        (``tasks: {source: NAME, ...}`` in bundle.yaml).

        Parameters: none.

        Returns: an iterable of ``TaskSource`` records.

        Example::

            @hookimpl
            def agentenv_task_sources():
                def read(config, bundle_dir):
                    for i, line in enumerate((bundle_dir / config["path"]).read_text().splitlines()):
                        yield RawTask(json.loads(line), file=config["path"], lines={(): i + 1})
                yield TaskSource(name="jsonl", read=read)
        """
        raise NotImplementedError


class ToolsetSpecs:
    """Hooks that change what a task offers the model."""

    @hookspec
    def agentenv_toolset(self, task: Task, toolset: Toolset) -> Toolset | None:
        """Change a task's toolset when its bundle loads.

        What for: offer bash everywhere, deny a dangerous tool across a bundle, swap a role.

        Parameters:
            task: the task as written (its ``toolset`` is the written one).
            toolset: the toolset so far: each plugin sees the previous plugin's result.

        Returns: a new ``Toolset``, or None to leave it as it is. Toolset keys are computed after.

        Example::

            @hookimpl
            def agentenv_toolset(task, toolset):
                if task.split == "train":
                    return toolset.model_copy(update={"bash": True})
        """
        raise NotImplementedError


class SessionSpecs:
    """Hooks that observe episodes (logging, metrics, tracing)."""

    @hookspec
    def agentenv_episode_started(self, episode: Episode) -> None:
        """Observe an episode as it starts (before its deploy).

        What for: count episodes, start a trace span, log which task is played.

        Parameters:
            episode: the episode; ``episode.task`` and ``episode.episode_id`` are set.

        Returns: nothing. An observer that raises is logged and ignored.

        Example::

            @hookimpl
            def agentenv_episode_started(episode):
                print("start", episode.task.id)
        """

    @hookspec
    def agentenv_episode_finished(self, episode: Episode, result: EpisodeResult) -> None:
        """Observe an episode's result, after its teardown.

        What for: metrics per outcome, failure alerts, timing dashboards.

        Parameters:
            episode: the episode that ended.
            result: its result (``outcome`` is scored, failed or unscored).

        Returns: nothing. An observer that raises is logged and ignored.

        Example::

            @hookimpl
            def agentenv_episode_finished(episode, result):
                if result.outcome == "failed":
                    print("env failure", result.failure.kind, result.failure.stage)
        """


class RewardSpecs:
    """Hooks that add reward rules."""

    @hookspec
    def agentenv_reward_rules(self) -> Iterable[RewardRule]:
        """Register reward rules.

        What for: combine a task's turn scores your way (``reward: NAME`` in a task, or
        ``build_app(reward=NAME)``).

        Parameters: none.

        Returns: an iterable of ``RewardRule`` records.

        Example::

            @hookimpl
            def agentenv_reward_rules():
                yield RewardRule(name="all-or-nothing",
                                 combine=lambda scores, params: float(all(s >= 1 for s in scores.values())))
        """
        raise NotImplementedError


class IntegrationSpecs:
    """Hooks by which trainer integrations announce themselves."""

    @hookspec
    def agentenv_integrations(self) -> Iterable[Integration]:
        """Register a trainer integration.

        What for: ``agentenv plugins`` shows each integration's supported trainer range against the
        installed version; writers find the objects an integration offers (a verl agent loop) here.

        Parameters: none.

        Returns: an iterable of ``Integration`` records.

        Example::

            @hookimpl
            def agentenv_integrations():
                yield Integration(name="verl", distribution="verl", supported=">=0.9.1,<0.10",
                                  offers={"agent_loop": "agentenv_verl.loop:AgentEnvAgentLoop"})
        """
        raise NotImplementedError


class CliSpecs:
    """Hooks that add ``agentenv`` subcommands."""

    @hookspec
    def agentenv_cli_commands(self) -> Iterable[CliCommand]:
        """Register ``agentenv`` subcommands.

        What for: integrations add their commands (``agentenv serve``, ``agentenv verl``).

        Parameters: none.

        Returns: an iterable of ``CliCommand`` records.

        Example::

            @hookimpl
            def agentenv_cli_commands():
                def configure(parser):
                    parser.add_argument("bundle")
                def run(args):
                    print(load_bundle(args.bundle).name)
                    return 0
                yield CliCommand(name="name", help="print a bundle's name", configure=configure, run=run)
        """
        raise NotImplementedError


SPEC_CLASSES: Final = (TaskSpecs, ToolsetSpecs, SessionSpecs, RewardSpecs, IntegrationSpecs, CliSpecs)


# --------------------------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------------------------


def check_trainer(requirement: str, *, integration: str, why: str, install: str, version: str | None = None) -> str:
    """Return the installed version of ``requirement``'s distribution (or ``version``) when it fits.

    Otherwise raise ``ImportError`` with both versions and the fix (``pip install REQUIREMENT`` or
    ``install``); ``why`` says what needs the trainer, ``integration`` names the wheel and its version.
    Reads distribution metadata only: the trainer is not imported.
    """
    from packaging.requirements import Requirement  # here: the plugins import this module on every CLI run

    wanted = Requirement(requirement)
    if version is None:
        try:
            version = md.version(wanted.name)
        except md.PackageNotFoundError:
            raise ImportError(f"{why} ({requirement}), which is not installed: {install}") from None
    if not wanted.specifier.contains(version, prereleases=True):
        raise ImportError(
            f"{integration} supports {requirement}, but {wanted.name} {version} is installed: "
            f"pip install '{requirement}' (or {install})"
        )
    return version


@dataclass(frozen=True)
class PluginLoadError:
    """A plugin that could not be loaded: its entry-point name, distribution and the error."""

    name: str
    distribution: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.name!r} (from {self.distribution}) was not loaded: {self.error}"


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin: its name, distribution and version, and the hooks it implements."""

    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...]


R = TypeVar("R")

BUILTIN = "agentenv-core"


class Plugins:
    """The loaded plugins, with typed lookups. Get the process-wide one with ``plugins()``."""

    def __init__(self, *, entry_points: bool = True, extra: Sequence[tuple[str, ModuleType | object]] = ()) -> None:
        self.manager = pluggy.PluginManager(NAME)
        for spec in SPEC_CLASSES:
            self.manager.add_hookspecs(spec)
        self.load_errors: list[PluginLoadError] = []
        self._dist: dict[str, tuple[str, str]] = {}
        from . import builtins

        self._register(BUILTIN, builtins, ("agentenv-core", _version("agentenv-core")))
        for name, obj in extra:
            self._register(name, obj, ("(in process)", ""))
        if entry_points:
            self._load_entry_points()
        self._cache: dict[str, dict[str, Any]] = {}

    # -- loading ------------------------------------------------------------------------------

    def _load_entry_points(self) -> None:
        for ep in sorted(md.entry_points(group=NAME), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            if self.manager.has_plugin(ep.name):
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # any import failure must not take the other plugins down
                self.load_errors.append(PluginLoadError(ep.name, dist, f"{type(exc).__name__}: {exc}"))
                log.warning("%s", self.load_errors[-1])
                continue
            self._register(ep.name, obj, (dist, version))

    def _register(self, name: str, obj: object, dist: tuple[str, str]) -> None:
        known = {n for spec in SPEC_CLASSES for n in vars(spec) if n.startswith(f"{NAME}_")}
        unknown = sorted(
            n for n in dir(obj) if n.startswith(f"{NAME}_") and callable(getattr(obj, n)) and n not in known
        )
        if unknown:
            hints = "; ".join(
                f"{n!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(n, known, 1)) else "")
                for n in unknown
            )
            self.load_errors.append(
                PluginLoadError(name, dist[0], f"defines {hints}, which is no agentenv hook; rename it")
            )
            log.warning("%s", self.load_errors[-1])
            return
        self.manager.register(obj, name=name)
        self._dist[name] = dist

    # -- records ------------------------------------------------------------------------------

    def _records(self, hook: str, kind: str, record_type: type[R]) -> dict[str, R]:
        if hook in self._cache:
            return self._cache[hook]
        found: dict[str, R] = {}
        owner: dict[str, str] = {}
        caller = getattr(self.manager.hook, hook)
        # registration order (get_hookimpls() lists it; pluggy *calls* in reverse): built-ins first,
        # then in-process extras, then entry points by name
        for impl in caller.get_hookimpls():
            plugin = impl.plugin_name
            try:
                produced = list(impl.function() or ())
            except Exception as exc:
                self.load_errors.append(
                    PluginLoadError(plugin, self._dist.get(plugin, ("?", ""))[0], f"{hook} raised {exc!r}")
                )
                log.warning("%s", self.load_errors[-1])
                continue
            for record in produced:
                if not isinstance(record, record_type):
                    raise PluginError(
                        f"plugin {plugin!r} yielded {record!r} from {hook}; yield {record_type.__name__} records"
                    )
                if record.name in found:  # type: ignore[attr-defined]
                    first = owner[record.name]  # type: ignore[attr-defined]
                    raise PluginError(
                        f"two plugins register the {kind} {record.name!r}: {self._describe(first)} and "  # type: ignore[attr-defined]
                        f"{self._describe(plugin)}; uninstall one of them or rename its {kind}"
                    )
                found[record.name] = record  # type: ignore[attr-defined]
                owner[record.name] = plugin  # type: ignore[attr-defined]
        self._cache[hook] = found
        return found

    def _describe(self, plugin: str) -> str:
        dist, version = self._dist.get(plugin, ("?", ""))
        return f"{plugin!r} ({dist} {version})".replace(" )", ")")

    def _lookup(self, hook: str, kind: str, record_type: type[R], name: str, fix: str) -> R:
        records = self._records(hook, kind, record_type)
        if name not in records:
            known = ", ".join(sorted(records)) or "none"
            raise PluginError(f"unknown {kind} {name!r}; known: {known}. {fix}")
        return records[name]

    def env_kinds(self) -> dict[str, EnvKind]:
        """Every env kind, by name."""
        return self._records("agentenv_env_kinds", "env kind", EnvKind)

    def verifier_kinds(self) -> dict[str, VerifierKind]:
        """Every verifier kind, by name."""
        return self._records("agentenv_verifier_kinds", "verifier kind", VerifierKind)

    def task_sources(self) -> dict[str, TaskSource]:
        """Every task source, by name."""
        return self._records("agentenv_task_sources", "task source", TaskSource)

    def reward_rules(self) -> dict[str, RewardRule]:
        """Every reward rule, by name."""
        return self._records("agentenv_reward_rules", "reward rule", RewardRule)

    def integrations(self) -> dict[str, Integration]:
        """Every trainer integration, by name."""
        return self._records("agentenv_integrations", "integration", Integration)

    def cli_commands(self) -> dict[str, CliCommand]:
        """Every CLI subcommand, by name."""
        return self._records("agentenv_cli_commands", "CLI command", CliCommand)

    def reward_rule(self, name: str) -> RewardRule:
        """The reward rule ``name``; the error lists the known ones."""
        return self._lookup(
            "agentenv_reward_rules",
            "reward rule",
            RewardRule,
            name,
            "Use one of those or install the plugin that provides it.",
        )

    def integration(self, name: str) -> Integration:
        """The integration ``name``; the error lists the installed ones."""
        return self._lookup(
            "agentenv_integrations",
            "integration",
            Integration,
            name,
            f"Install it: pip install agentenv-{name}",
        )

    # -- observers and toolsets ---------------------------------------------------------------

    def apply_toolset_hooks(self, task: Task, toolset: Toolset) -> Toolset:
        """Run every ``agentenv_toolset`` hook in registration order, each seeing the previous result."""
        for impl in self.manager.hook.agentenv_toolset.get_hookimpls():
            changed = impl.function(task=task, toolset=toolset)
            if changed is not None:
                toolset = changed
        return toolset

    def notify_started(self, episode: Episode) -> None:
        """Tell the session observers an episode started; an observer's error is logged, not raised."""
        self._notify("agentenv_episode_started", episode=episode)

    def notify_finished(self, episode: Episode, result: EpisodeResult) -> None:
        """Tell the session observers an episode finished."""
        self._notify("agentenv_episode_finished", episode=episode, result=result)

    def _notify(self, hook: str, **kwargs: Any) -> None:
        for impl in getattr(self.manager.hook, hook).get_hookimpls():
            try:
                impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception:
                log.exception("plugin %r failed in %s (ignored)", impl.plugin_name, hook)

    # -- introspection ------------------------------------------------------------------------

    def infos(self) -> list[PluginInfo]:
        """Every loaded plugin with its distribution, version and hooks."""
        out = []
        for name, obj in self.manager.list_name_plugin():
            hooks = tuple(sorted(c.name for c in self.manager.get_hookcallers(obj) or ()))
            dist, version = self._dist.get(name, ("?", ""))
            out.append(PluginInfo(name, dist, version, hooks))
        return sorted(out, key=lambda i: (i.name != BUILTIN, i.name))


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


_lock = threading.Lock()


@functools.cache
def _cached() -> Plugins:
    return Plugins()


def plugins() -> Plugins:
    """The process-wide plugins, loaded on first use."""
    with _lock:
        return _cached()


def reset_plugins() -> None:
    """Forget the loaded plugins (the next ``plugins()`` loads them again). For tests and notebooks."""
    with _lock:
        _cached.cache_clear()


def resolve(target: str, *, bundle_dir: Path | None = None, what: str = "object") -> Any:
    """Import ``"module:attr"``; a module in ``bundle_dir`` is found there first.

    Raises ``LookupError`` with a message naming the target and the fix.
    """
    if ":" not in target:
        raise LookupError(f"{what} {target!r} is not of the form 'module:name'; write it as module:name")
    module_name, _, attr = target.partition(":")
    module = _import_module(module_name, bundle_dir)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LookupError(f"{what} {target!r}: module {module_name!r} has no {attr!r}; check the name")
        obj = getattr(obj, part)
    return obj


_bundle_modules: dict[tuple[str, str], ModuleType] = {}
_bundle_lock = threading.Lock()


def _import_module(module_name: str, bundle_dir: Path | None) -> ModuleType:
    """Import a module from the bundle folder (by file, under a private name) or else normally.

    Bundle modules are imported by path, not through sys.path, so two bundles may both have an
    ``env.py`` without one shadowing the other.
    """
    if bundle_dir is not None:
        rel = Path(*module_name.split("."))
        for candidate in (bundle_dir / rel.with_suffix(".py"), bundle_dir / rel / "__init__.py"):
            if candidate.is_file():
                key = (str(candidate.resolve()), module_name)
                with _bundle_lock:
                    if key in _bundle_modules:
                        return _bundle_modules[key]
                    import hashlib
                    import sys

                    tag = hashlib.sha1(str(bundle_dir.resolve()).encode()).hexdigest()[:10]
                    private = f"_agentenv_bundle_{tag}_{module_name.replace('.', '_')}"
                    spec = importlib.util.spec_from_file_location(private, candidate)
                    if spec is None or spec.loader is None:
                        break
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[private] = module
                    # the bundle folder is importable while the module runs, so it may import its siblings
                    sys.path.insert(0, str(bundle_dir))
                    try:
                        spec.loader.exec_module(module)
                    except BaseException:
                        sys.modules.pop(private, None)
                        raise
                    finally:
                        sys.path.remove(str(bundle_dir))
                    _bundle_modules[key] = module
                    return module
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = f" (looked in {bundle_dir} and on sys.path)" if bundle_dir else ""
        raise LookupError(f"module {module_name!r} not found{where}: {exc}") from None
