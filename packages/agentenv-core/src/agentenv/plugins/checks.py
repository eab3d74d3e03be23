"""What makes a plugin unusable, found before it is used: its hook names and arguments, the records its
registration hooks yield; and how a plugin left out, or one loaded, is described (``agentenv.plugins`` uses them)."""

from __future__ import annotations

import difflib
import importlib.metadata as md
import inspect
from dataclasses import dataclass
from typing import Any, Final

import pluggy

from agentenv.plugins.hookspecs import NAME, SPEC_CLASSES
from agentenv.plugins.records import Integration

__all__ = [
    "FIX",
    "HOOKS",
    "SEE_SPECS",
    "LeftOut",
    "PluginInfo",
    "PluginProblem",
    "check_hook_names",
    "check_record",
    "installed_version",
]

HOOKS: Final = frozenset(name for spec in SPEC_CLASSES for name in vars(spec) if name.startswith(f"{NAME}_"))


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that was left out: its name, distribution and version, what was wrong and the fix."""

    plugin: str
    distribution: str
    version: str
    error: str
    fix: str

    def __str__(self) -> str:
        source = f"{self.distribution} {self.version}".strip()
        return f"plugin {self.plugin!r} ({source}) was left out: {self.error}; {self.fix}"


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin: its name, distribution and version, the hooks it implements and which it wraps."""

    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...]
    wrappers: tuple[str, ...] = ()


class LeftOut(Exception):
    """Why a plugin is left out, and the fix."""

    def __init__(self, error: str, fix: str) -> None:
        super().__init__(error)
        self.error, self.fix = error, fix


FIX = "fix the plugin, or uninstall it"
SEE_SPECS = "write each hook as agentenv.plugins.hookspecs documents it"


def check_hook_names(manager: pluggy.PluginManager, obj: object) -> None:
    """Refuse a plugin whose hook names or arguments match no hook (pluggy would accept it silently)."""
    for attr in dir(obj):
        try:
            opts = manager.parse_hookimpl_opts(obj, attr)
        except Exception:  # an attribute that cannot be read is nothing of ours
            continue
        if opts is None:
            if attr.startswith(f"{NAME}_") and callable(getattr(obj, attr, None)):
                if attr in HOOKS:
                    raise LeftOut(f"{attr} is not marked as a hook", f"decorate it with @{NAME}.plugins.hookimpl")
                raise LeftOut(f"{attr!r} is no agentenv hook{_meant(attr)}", "rename it")
            continue
        hook = opts.get("specname") or attr
        if hook not in HOOKS:
            raise LeftOut(f"its hookimpl {attr!r} implements no agentenv hook{_meant(hook)}", "rename it")
        function = getattr(obj, attr)
        spec = getattr(manager.hook, hook).spec
        taken = [a for a in _argnames(function) if a not in spec.argnames]
        if taken:
            wants = ", ".join(spec.argnames)
            raise LeftOut(
                f"its {hook} takes {', '.join(map(repr, taken))}, which the hook does not pass",
                f"write def {hook}({wants}) (any of those arguments, by name)",
            )


def _argnames(function: Any) -> list[str]:
    params = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return params[1:] if params[:1] in (["self"], ["cls"]) and not inspect.ismethod(function) else params


def _meant(name: str) -> str:
    close = difflib.get_close_matches(name, sorted(HOOKS), 1, 0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_record(hook: str, record: Any, record_type: type) -> None:
    """Refuse a record of the wrong type, or an integration whose trainer range cannot be read."""
    if not isinstance(record, record_type):
        raise LeftOut(
            f"its {hook} yielded {record!r}",
            f"yield {record_type.__name__} records (from agentenv.plugins import {record_type.__name__})",
        )
    if isinstance(record, Integration):
        try:
            _ = record.requirement
        except LookupError as exc:
            raise LeftOut(f"its integration {record.name!r} has no readable trainer range: {exc}", FIX) from None


def installed_version(dist: str) -> str:
    """The installed version of ``dist``, or ``?``."""
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"
