"""agentenv's plugins: the manager that loads them, leaves the broken ones out, and calls the hooks.

What a plugin author imports is here: ``hookimpl``, the records its hooks yield (``EnvKind``,
``VerifierKind``, ``AgentKind``, ``TaskSource``, ``RewardRule``, ``Integration``, ``CliCommand``,
``Sandbox``), ``Problem`` for a kind's ``check``, and ``resolve`` for ``module:attr`` targets. The hooks
themselves, with what each gets and returns, are documented in ``agentenv.plugins.hookspecs``.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import logging
import threading
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import pluggy

from agentenv.errors import PluginError
from agentenv.plugins.checks import (
    FIX,
    SEE_SPECS,
    LeftOut,
    PluginInfo,
    PluginProblem,
    check_hook_names,
    check_record,
    installed_version,
)
from agentenv.plugins.hookspecs import NAME, SPEC_CLASSES
from agentenv.plugins.records import (
    AgentKind,
    CliCommand,
    EnvKind,
    Integration,
    ObservedEpisode,
    RewardRule,
    Sandbox,
    TaskSource,
    VerifierKind,
)

__all__ = ["Plugins", "plugins", "reset_plugins"]  # the face, agentenv.plugins, names the rest

log = logging.getLogger("agentenv.plugins")  # the name users configure; kept when the module moved

CORE: Final[str] = "agentenv-core"
# agentenv-core's own plugins, registered first by module name (as pytest loads its default plugins):
# the manager never imports them, so they may import the rest of the core freely
BUILTINS: Final = ("agentenv.engine.builtins", "agentenv.cli.commands")

# registration hook -> what its records are called, and their type
REGISTRATION: Final[dict[str, tuple[str, type]]] = {
    "agentenv_env_kinds": ("env kind", EnvKind),
    "agentenv_verifier_kinds": ("verifier kind", VerifierKind),
    "agentenv_agent_kinds": ("agent kind", AgentKind),
    "agentenv_task_sources": ("task source", TaskSource),
    "agentenv_reward_rules": ("reward rule", RewardRule),
    "agentenv_sandboxes": ("sandbox", Sandbox),
    "agentenv_integrations": ("integration", Integration),
    "agentenv_cli_commands": ("CLI command", CliCommand),
}


T = TypeVar("T")


class Plugins:
    """The loaded plugins, with typed lookups; every hook is called through ``manager.hook``.

    Loads agentenv-core's built-ins, then ``extra`` (``(name, plugin)`` pairs, in process), then
    the entry points of the ``agentenv`` group by name (unless ``entry_points`` is False). Each
    registration hook is called when its records are first needed, as plugins expect (a plugin
    imports its heavy parts in its hooks). A plugin that cannot be used is left out whole as soon
    as that is found (at load, or when a registration hook of it fails or takes a name), listed in
    ``problems`` and logged once as a warning. No plugin is added once built. Get the process-wide
    one with ``plugins()``.
    """

    def __init__(self, *, entry_points: bool = True, extra: Sequence[tuple[str, object]] = ()) -> None:
        self.manager = pluggy.PluginManager(NAME)
        for spec in SPEC_CLASSES:
            self.manager.add_hookspecs(spec)
        self.problems: list[PluginProblem] = []
        self._source: dict[str, tuple[str, str]] = {}
        self._records: dict[str, dict[str, Any]] = {}  # registration hook -> name -> record, once collected
        self._owners: dict[str, dict[str, str]] = {}  # registration hook -> name -> plugin
        self._callers: dict[str, tuple[tuple[str, pluggy.HookCaller], ...]] = {}
        self._collecting = threading.RLock()
        for module in BUILTINS:
            self._add(module, importlib.import_module(module), (CORE, installed_version(CORE)), builtin=True)
        for name, obj in extra:
            self._add(name, obj, ("(in process)", ""))
        if entry_points:
            self._load_entry_points()

    # -- loading ------------------------------------------------------------------------------

    def _load_entry_points(self) -> None:
        for ep in sorted(md.entry_points(group=NAME), key=lambda e: e.name):
            source = (ep.dist.name, ep.dist.version) if ep.dist is not None else ("?", "")
            if ep.name in self._source:
                owner = self._source[ep.name][0]
                self._leave_out(
                    ep.name,
                    source,
                    LeftOut(
                        f"{owner} already installs a plugin of that name",
                        f"uninstall one of them, or rename the entry point in [project.entry-points.{NAME}]",
                    ),
                )
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # any import failure must not take the other plugins down
                fix = f"fix the import, or uninstall {source[0]}"
                self._leave_out(
                    ep.name, source, LeftOut(f"importing {ep.value} failed: {type(exc).__name__}: {exc}", fix)
                )
                continue
            self._add(ep.name, obj, source)

    def _add(self, name: str, obj: object, source: tuple[str, str], *, builtin: bool = False) -> None:
        try:
            check_hook_names(self.manager, obj)
            try:
                self.manager.register(obj, name=name)
            except pluggy.PluginValidationError as exc:
                if self.manager.get_plugin(name) is obj:  # older pluggy leaves a refused plugin half registered
                    self.manager.unregister(name=name)
                raise LeftOut(f"pluggy refused it: {' '.join(str(exc).split())}", SEE_SPECS) from None
            except ValueError as exc:  # pluggy: the object is already registered under another name
                raise LeftOut(" ".join(str(exc).split()), "register each plugin object once") from None
        except LeftOut as exc:
            if builtin:
                raise RuntimeError(f"agentenv's built-in plugin {name} is broken: {exc.error}") from None
            self._leave_out(name, source, exc)
            return
        self._source[name] = source

    def _leave_out(self, name: str, source: tuple[str, str], why: LeftOut) -> None:
        if self.manager.get_plugin(name) is not None:
            self.manager.unregister(name=name)
        problem = PluginProblem(name, source[0], source[1], why.error, why.fix)
        self.problems.append(problem)
        log.warning("%s", problem)

    def collect(self) -> None:
        """Call every registration hook now (each is otherwise called when its records are first needed).

        ``agentenv plugins`` does, so that ``problems`` lists every plugin that would be left out.
        """
        for hook in REGISTRATION:
            self._collected(hook)

    def _collected(self, hook: str) -> dict[str, Any]:
        found = self._records.get(hook)
        if found is None:
            with self._collecting:  # threads that ask at once: the hook is still called once
                found = self._records.get(hook)
                if found is None:
                    found = self._collect(hook)
        return found

    def _collect(self, hook: str) -> dict[str, Any]:
        """Call ``hook`` per plugin; a plugin whose records are wrong or taken is left out, whole."""
        what, record_type = REGISTRATION[hook]
        made: dict[str, list[Any]] = {}
        for plugin, caller in self.callers(hook):
            try:
                records = [r for result in caller() for r in (result or ())]
                for record in records:
                    check_record(hook, record, record_type)
            except LeftOut as exc:
                self._leave_plugin_out(plugin, exc)
                continue
            except Exception as exc:
                self._leave_plugin_out(plugin, LeftOut(f"its {hook} raised {type(exc).__name__}: {exc}", FIX))
                continue
            made[plugin] = records
        accepted: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for plugin, _ in self.manager.list_name_plugin():  # registration order: the built-ins keep their names
            records = made.get(plugin, [])
            names = [r.name for r in records]
            taken = [(n, owners.get(n, plugin)) for i, n in enumerate(names) if n in owners or n in names[:i]]
            if taken:
                self._leave_plugin_out(plugin, self._clash(what, taken))
                continue
            accepted.update((r.name, r) for r in records)
            owners.update((n, plugin) for n in names)
        self._records[hook], self._owners[hook] = accepted, owners
        return accepted

    def _clash(self, what: str, taken: list[tuple[str, str]]) -> LeftOut:
        said = "; ".join(f"the {what} {name!r} is registered by {self._describe(first)}" for name, first in taken)
        if any(self._source.get(first, ("",))[0] == CORE for _, first in taken):
            fix = f"rename its {what} (a built-in name is never replaced)"
        else:
            fix = f"rename its {what}, or uninstall one of the two"
        return LeftOut(f"it registers a name already taken: {said}", fix)

    def _leave_plugin_out(self, plugin: str, why: LeftOut) -> None:
        source = self._source.pop(plugin, ("?", ""))
        if source[0] == CORE:
            raise RuntimeError(f"agentenv's built-in plugin {plugin} is broken: {why.error}")
        self._leave_out(plugin, source, why)
        self._callers.clear()
        for hook, owners in self._owners.items():  # what it registered for hooks collected before goes too
            for name in [n for n, p in owners.items() if p == plugin]:
                del owners[name], self._records[hook][name]

    def _describe(self, plugin: str) -> str:
        dist, version = self._source.get(plugin, ("?", ""))
        return f"{plugin!r} ({dist} {version})".replace(" )", ")")

    # -- calling hooks ------------------------------------------------------------------------

    def callers(self, hook: str) -> tuple[tuple[str, pluggy.HookCaller], ...]:
        """``(plugin, caller)`` for each plugin that implements ``hook``, in calling order.

        Each caller is pluggy's hook caller for that plugin's implementation with every wrapper of
        the hook around it. The order is registration order; ``tryfirst`` and ``trylast`` move a
        plugin to the front or the back. Built once per hook (an episode's observers use it).
        """
        found = self._callers.get(hook)
        if found is None:
            everyone = getattr(self.manager.hook, hook)
            plain = [i for i in everyone.get_hookimpls() if not (i.wrapper or i.hookwrapper)]
            order = {name: i for i, (name, _) in enumerate(self.manager.list_name_plugin())}
            plain.sort(key=lambda i: (0 if i.tryfirst else 2 if i.trylast else 1, order.get(i.plugin_name, 0)))
            owners = list(dict.fromkeys(i.plugin for i in plain))
            found = tuple(
                (
                    self.manager.get_name(owner) or "?",
                    self.manager.subset_hook_caller(hook, [o for o in owners if o is not owner]),
                )
                for owner in owners
            )
            self._callers[hook] = found
        return found

    def apply_toolset_hooks(self, task: Any, toolset: T) -> T:
        """Run every ``agentenv_toolset`` hook on ``task``, in order, each seeing the previous result.

        Called once per task as a bundle loads: with no implementation it returns at once.
        """
        for plugin, caller in self.callers("agentenv_toolset"):
            try:
                results = caller(task=task, toolset=toolset)
            except Exception as exc:
                raise PluginError(
                    f"plugin {self._describe(plugin)} failed in agentenv_toolset for task {task.id!r}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            for changed in results:
                if not isinstance(changed, type(toolset)):
                    raise PluginError(
                        f"plugin {self._describe(plugin)} returned {changed!r} from agentenv_toolset for task "
                        f"{task.id!r}; return a Toolset (toolset.model_copy(update=...)) or None"
                    )
                toolset = changed
        return toolset

    def notify_started(self, episode: ObservedEpisode) -> None:
        """Tell the observers an episode started; an observer's error is logged, not raised."""
        self._observe("agentenv_episode_started", episode=episode)

    def notify_finished(self, episode: ObservedEpisode, result: Any) -> None:
        """Tell the observers an episode finished; an observer's error is logged, not raised."""
        self._observe("agentenv_episode_finished", episode=episode, result=result)

    def _observe(self, hook: str, **kwargs: Any) -> None:
        for plugin, caller in self.callers(hook):
            try:
                caller(**kwargs)
            except Exception:
                log.exception("plugin %r failed in %s (ignored)", plugin, hook)

    # -- records ------------------------------------------------------------------------------

    def env_kinds(self) -> dict[str, EnvKind]:
        """Every env kind, by name."""
        return self._collected("agentenv_env_kinds")

    def agent_kinds(self) -> dict[str, AgentKind]:
        """Every agent kind, by name."""
        return self._collected("agentenv_agent_kinds")

    def verifier_kinds(self) -> dict[str, VerifierKind]:
        """Every verifier kind, by name."""
        return self._collected("agentenv_verifier_kinds")

    def task_sources(self) -> dict[str, TaskSource]:
        """Every task source, by name."""
        return self._collected("agentenv_task_sources")

    def reward_rules(self) -> dict[str, RewardRule]:
        """Every reward rule, by name."""
        return self._collected("agentenv_reward_rules")

    def sandboxes(self) -> dict[str, Sandbox]:
        """Every sandbox backend, by name."""
        return self._collected("agentenv_sandboxes")

    def integrations(self) -> dict[str, Integration]:
        """Every trainer integration, by name."""
        return self._collected("agentenv_integrations")

    def cli_commands(self) -> dict[str, CliCommand]:
        """Every CLI subcommand, by name."""
        return self._collected("agentenv_cli_commands")

    def reward_rule(self, name: str) -> RewardRule:
        """The reward rule ``name``; the error lists the known ones."""
        return self._lookup("agentenv_reward_rules", name, "Use one of those or install the plugin that provides it.")

    def integration(self, name: str) -> Integration:
        """The integration ``name``; the error lists the installed ones."""
        return self._lookup("agentenv_integrations", name, f"Install it: pip install agentenv-{name}")

    def _lookup(self, hook: str, name: str, fix: str) -> Any:
        records = self._collected(hook)
        if name not in records:
            known = ", ".join(sorted(records)) or "none"
            left_out = f" ({self.left_out_note()})" if self.problems else ""
            raise PluginError(f"unknown {REGISTRATION[hook][0]} {name!r}; known: {known}. {fix}{left_out}")
        return records[name]

    def left_out_note(self) -> str:
        """A short note naming the plugins that were left out (empty when none was)."""
        if not self.problems:
            return ""
        names = ", ".join(repr(p.plugin) for p in self.problems)
        return f"plugin{'s' if len(self.problems) > 1 else ''} {names} left out: see agentenv plugins"

    # -- introspection ------------------------------------------------------------------------

    def infos(self) -> list[PluginInfo]:
        """Every loaded plugin with its distribution, version, hooks and wrapped hooks, built-ins first."""
        out = []
        for name, obj in self.manager.list_name_plugin():
            impls = [(c.name, i) for c in self.manager.get_hookcallers(obj) or () for i in c.get_hookimpls()]
            mine = [(hook, i) for hook, i in impls if i.plugin is obj]
            hooks = tuple(sorted({hook for hook, _ in mine}))
            wrappers = tuple(sorted({hook for hook, i in mine if i.wrapper or i.hookwrapper}))
            dist, version = self._source.get(name, ("?", ""))
            out.append(PluginInfo(name, dist, version, hooks, wrappers))
        return sorted(out, key=lambda i: (i.distribution != CORE, i.name))


_lock = threading.Lock()
_loaded: list[Plugins] = []


def plugins() -> Plugins:
    """The process-wide plugins, loaded on first use (each plugin left out is logged once, as a warning)."""
    with _lock:
        if not _loaded:
            _loaded.append(Plugins())
        return _loaded[0]


def reset_plugins() -> None:
    """Forget the loaded plugins (the next ``plugins()`` loads them again). For tests and notebooks."""
    with _lock:
        _loaded.clear()
