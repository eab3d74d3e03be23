"""Which sandbox backend this process runs the policy's programs in: chosen once, said at start.

The choice, first found wins: ``use(NAME)`` (``agentenv serve --sandbox NAME``, ``--no-sandbox`` for ``none``),
then ``$AGENTENV_SANDBOX``, then ``auto``: ``bwrap``. A backend that cannot run here is never swapped for another
in silence: ``current()`` raises ``SandboxUnavailable`` naming the fix (install bubblewrap, or choose ``none`` on
purpose), and ``none`` is logged as a warning every time it is chosen.
"""

from __future__ import annotations

import logging
import os
import threading

from agentenv.sandboxing import SandboxBackend, SandboxUnavailable

__all__ = ["VAR", "current", "runs_programs", "use"]

VAR = "AGENTENV_SANDBOX"
DEFAULT = "bwrap"

log = logging.getLogger("agentenv.sandbox")
_lock = threading.Lock()
_chosen: str | None = None
_backend: SandboxBackend | None = None
_named: dict[str, SandboxBackend] = {}  # the backends agents name (an agent's sandbox.backend)


def use(name: str | None) -> None:
    """Run this process's programs in backend ``name`` (None: back to ``$AGENTENV_SANDBOX`` or the default)."""
    global _chosen, _backend
    with _lock:
        _chosen, _backend = name, None
        _named.clear()


def current(name: str | None = None) -> SandboxBackend:
    """The backend in force, checked (once) that it runs here; ``SandboxUnavailable`` naming the fix if not.
    With ``name`` (an agent's ``sandbox.backend``), that backend instead, checked the same way."""
    global _backend
    if name is not None:
        return _of(name)
    with _lock:
        if _backend is not None:
            return _backend
        name = _chosen or os.environ.get(VAR) or "auto"
        how = "chosen" if _chosen else f"${VAR}" if os.environ.get(VAR) else "the default"
        backend = _make(DEFAULT if name == "auto" else name, how)
        problem = backend.problem()
        if problem is not None:
            raise SandboxUnavailable(f"sandbox {backend.name!r} ({how}) cannot run here: {problem}")
        if backend.name == "none":
            log.warning("agentenv: sandbox: %s", backend.describe())
        else:
            log.info("agentenv: sandbox: %s", backend.describe())
        _backend = backend
        return backend


def _of(name: str) -> SandboxBackend:
    with _lock:
        if name in _named:
            return _named[name]
        how = f"sandbox.backend: {name}"
        backend = _make(DEFAULT if name == "auto" else name, how)
        problem = backend.problem()
        if problem is not None:
            raise SandboxUnavailable(f"sandbox {backend.name!r} ({how}) cannot run here: {problem}")
        level = logging.WARNING if backend.name == "none" else logging.INFO
        log.log(level, "agentenv: sandbox of an agent (%s): %s", how, backend.describe())
        _named[name] = backend
        return backend


def _make(name: str, how: str) -> SandboxBackend:
    from agentenv.plugins import plugins

    found = plugins().sandboxes()
    if name not in found:
        known = ", ".join(sorted(found))
        raise SandboxUnavailable(
            f"unknown sandbox {name!r} ({how}); known: {known} (a plugin adds others: see agentenv plugins)"
        )
    return found[name].create()


def runs_programs(bundle: object) -> bool:
    """Whether ``bundle`` runs programs the policy steers (a ``bash`` tool, a subprocess env, an agent)."""
    envs = getattr(bundle, "envs", {})
    if any(spec.kind in ("bash", "subprocess") for spec in envs.values()) or getattr(bundle, "agents", {}):
        return True
    return any(task.toolset.bash for task in getattr(bundle, "tasks", []))
