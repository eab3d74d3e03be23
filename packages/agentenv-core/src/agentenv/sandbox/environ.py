"""The environment of a program agentenv starts for the policy: an allowlist, never a copy of this process's.

A bash command, a subprocess env's program and an agent start from ``PATH``, ``LANG``, their own ``HOME`` and
``TMPDIR`` (in the episode's scratch) and the owner tags (``agentenv.sandbox.procs``), plus what the bundle declares
for that env or agent: its ``env:`` values and the variables its ``pass_env:`` names. Nothing else of the
server's or the trainer's environment reaches them (a token, a cloud key, a judge's key).

Some names are never passed even when listed: the server's token variable and every endpoint's ``key_var``.
The bundle loader refuses a ``pass_env`` that lists a ``key_var``, ``agentenv serve`` one that lists its
``--token-var``; ``program_environ`` leaves out every name registered with ``keep_secret`` all the same.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["BASE_VARS", "keep_secret", "passed_anywhere", "program_environ", "secrets_kept"]

BASE_VARS = ("PATH", "LANG")
DEFAULTS = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

_lock = threading.Lock()
_secret: set[str] = set()


def keep_secret(*names: str | None) -> None:
    """Never pass these variables to a program started for the policy (``agentenv serve`` gives its token's)."""
    with _lock:
        _secret.update(n for n in names if n)


def passed_anywhere(name: str, **sections: Mapping[str, Any]) -> list[str]:
    """The fields that list ``name`` in a ``pass_env`` (``envs.db.pass_env``), of specs given by section
    (``envs=bundle.envs, agents=bundle.agents``)."""
    return [
        f"{section}.{spec_name}.pass_env"
        for section, specs in sections.items()
        for spec_name, spec in specs.items()
        if name in spec.pass_env
    ]


def secrets_kept() -> frozenset[str]:
    """The variable names ``keep_secret`` registered in this process."""
    with _lock:
        return frozenset(_secret)


def program_environ(
    home: str | Path,
    tmp: str | Path,
    *,
    env: Mapping[str, object] | None = None,
    pass_env: Iterable[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one program: ``PATH`` and ``LANG`` (from ``source``, default this process's
    environment), ``HOME=home``, ``TMPDIR=tmp``, the ``pass_env`` variables that are set in ``source``, then
    ``env``'s values. A name registered with ``keep_secret`` is never taken from ``source``."""
    source = os.environ if source is None else source
    secret = secrets_kept()
    out = {name: source.get(name) or DEFAULTS[name] for name in BASE_VARS}
    out.update(HOME=str(home), TMPDIR=str(tmp))
    out.update({name: source[name] for name in pass_env if name in source and name not in secret})
    out.update({str(k): str(v) for k, v in (env or {}).items()})
    return out
