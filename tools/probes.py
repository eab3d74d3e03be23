"""Every integration's API probe against the trainers installed here (``nox -s canary`` runs it on the newest).

    python -m tools.probes

Each integration names the trainer internals it leans on once (``agentenv_*._api``); this resolves all of them
and prints a line per integration, then exits 1 if any internal is missing (each refusal names the trainer
version, the supported range and the missing name).
"""

from __future__ import annotations

import importlib
import sys

from agentenv.plugins.internals import MissingInternal, probe

# (integration record, internals) by where they are declared
PROBES = [
    ("agentenv_server._api", "OPENENV", "OPENENV_INTERNALS"),
    ("agentenv_harness._version", "OPENENV", "agentenv_harness._api:OPENENV_INTERNALS"),
    ("agentenv_harness._version", "TRL", "agentenv_harness._api:TRL_INTERNALS"),
    ("agentenv_trl._version", "INTEGRATION", "agentenv_trl._api:INTERNALS"),
    ("agentenv_verl._version", "INTEGRATION", "agentenv_verl._api:AGENT_LOOP"),
    ("agentenv_verl._version", "INTEGRATION", "agentenv_verl._api:SINGLE_TURN_LOOP"),
]


def _load(module: str, name: str) -> object:
    if ":" in name:
        module, name = name.split(":")
    return getattr(importlib.import_module(module), name)


def main() -> int:
    failed = 0
    for module, record, internals in PROBES:
        integration, names = _load(module, record), _load(module, internals)
        what = f"{integration.package} on {integration.trainer} {integration.installed_version()}"
        try:
            probe(integration, names)
        except MissingInternal as exc:
            failed += 1
            print(f"{what}: {exc}")
        else:
            print(f"{what}: all {len(names)} internals of {internals.rpartition(':')[2]} found")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
