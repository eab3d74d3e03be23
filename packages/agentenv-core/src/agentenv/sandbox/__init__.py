"""What a program agentenv starts for the policy may reach.

Its environment is an allowlist (``environ``); its files, processes and network are a sandbox's (``backend``: the
seam, ``bwrap``: bubblewrap, ``nobox``: ``none``, the explicit hole, ``choice``: which one is in force), with
limits (``limits``). See docs/sandbox.md, "What the policy can reach".
"""

from __future__ import annotations

from agentenv.sandbox.choice import VAR, current, runs_programs, use
from agentenv.sandbox.environ import BASE_VARS, keep_secret, passed_anywhere, program_environ, secrets_kept
from agentenv.sandbox.procs import FDS_PER_CHILD
from agentenv.sandbox.relay import relayed_key
from agentenv.sandboxing import (
    LIMITS_HIT,
    Limits,
    Opening,
    Prepared,
    Program,
    SandboxBackend,
    SandboxUnavailable,
    signal_breach,
)

__all__ = [
    "BASE_VARS",
    "FDS_PER_CHILD",
    "LIMITS_HIT",
    "VAR",
    "Limits",
    "Opening",
    "Prepared",
    "Program",
    "SandboxBackend",
    "SandboxUnavailable",
    "current",
    "keep_secret",
    "passed_anywhere",
    "procs",
    "program_environ",
    "relayed_key",
    "runs_programs",
    "secrets_kept",
    "signal_breach",
    "use",
]
