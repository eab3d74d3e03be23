"""The trainer internals an integration leans on, and the probe that checks them before anything runs.

An integration that subclasses a trainer's classes or calls its helpers names each of them once, as an
``Internal``; ``probe`` resolves every one (importing the trainer's modules) and refuses, naming the
trainer version found, the range the integration supports and the missing name, when a release
renamed or dropped one. Integrations call it when their loop is built, before any rollout runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentenv.plugins.records import Integration

__all__ = ["Internal", "MissingInternal", "probe"]


class MissingInternal(ImportError):
    """A trainer internal an integration leans on is not in the installed trainer."""


@dataclass(frozen=True)
class Internal:
    """One name of the trainer's an integration leans on.

    ``name``: ``"module:Qualified.name"``
    (``"verl.experimental.agent_loop.agent_loop:AgentLoopBase.ct_merge_context_msg"``).
    ``parameters``: names a callable must accept (or take through ``**kwargs``).
    ``attributes``: names a class must have: class attributes, pydantic or dataclass fields, or
    attributes its ``__init__`` assigns (``self.prompt_ids = ...``).
    """

    name: str
    parameters: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.name.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.name.partition(":")[2]


def probe(integration: Integration, internals: Sequence[Internal]) -> dict[str, Any]:
    """Resolve every internal in the installed trainer: the objects by ``Internal.name``.

    Raises ``MissingInternal`` naming the trainer version installed, the range ``integration`` supports
    and each missing name (a module, a name, a parameter or an attribute), with the fix.
    """
    found: dict[str, Any] = {}
    missing: list[str] = []
    for internal in internals:
        obj, why = _resolve(internal)
        if why is None:
            why = _lacks(internal, obj)
        if why is None:
            found[internal.name] = obj
        else:
            missing.append(why)
    if missing:
        version = integration.installed_version() or "(not installed)"
        raise MissingInternal(
            f"{integration.package} leans on {integration.trainer} internals that {integration.trainer} {version} "
            f"lacks: {'; '.join(missing)}. {integration.package} supports {integration.requirement}: install a "
            f"release in that range ({integration.install}). A newer {integration.trainer} renamed or dropped them: "
            f"{integration.package} needs a release that knows it"
        )
    return found


def _resolve(internal: Internal) -> tuple[Any, str | None]:
    try:
        module = importlib.import_module(internal.module)
    except ImportError as exc:
        return None, f"module {internal.module} ({type(exc).__name__}: {exc})"
    obj: Any = module
    for part in internal.qualname.split("."):
        obj = getattr(obj, part, _ABSENT)
        if obj is _ABSENT:
            return None, f"{internal.module}.{internal.qualname} (not found)"
    return obj, None


def _lacks(internal: Internal, obj: Any) -> str | None:
    """What ``obj`` lacks of ``internal``'s parameters and attributes, or None."""
    where = f"{internal.module}.{internal.qualname}"
    if internal.parameters:
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            return f"{where} (not a callable with a signature)"
        params = signature.parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        absent = [p for p in internal.parameters if p not in params and not takes_any]
        if absent:
            return f"{where}'s parameter(s) {', '.join(absent)} (it takes {', '.join(params) or 'none'})"
    if internal.attributes:
        known = _attributes(obj)
        absent = [a for a in internal.attributes if a not in known and not hasattr(obj, a)]
        if absent:
            return f"{where}'s attribute(s) {', '.join(absent)}"
    return None


def _attributes(cls: Any) -> set[str]:
    """The attributes instances of ``cls`` have: pydantic and dataclass fields, and those ``__init__`` assigns."""
    names: set[str] = set(getattr(cls, "model_fields", {}) or {})
    if dataclasses.is_dataclass(cls):
        names.update(f.name for f in dataclasses.fields(cls))
    for klass in getattr(cls, "__mro__", ()):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            source = inspect.getsource(init)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"self\.(\w+)\s*(?::[^=\n]+)?=", source))
    return names


_ABSENT = object()
