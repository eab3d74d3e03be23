"""The ``none`` sandbox backend: the explicit hole. Programs run on the host as this process's user.

Only by choice (``agentenv serve --no-sandbox``, ``AGENTENV_SANDBOX=none``), and said loudly at start: a program
the policy steers then sees every file this user may read (the bundle's answer key and verifiers too), the process
table, the network and the host's loopback services. Its environment is still the allowlist
(``agentenv.sandbox.environ``); CPU time and file size are still limited by rlimits; memory, processes and disk
are not. For a machine that is itself the sandbox (a throwaway VM or container per run), or to debug.
"""

from __future__ import annotations

from agentenv.sandbox.limits import limited_argv
from agentenv.sandboxing import Prepared, Program, signal_breach

__all__ = ["NoSandbox"]


class NoSandbox:
    """Runs each ``Program`` as it is, on the host (see the module docstring)."""

    name = "none"
    isolates_processes = False

    def problem(self) -> str | None:
        """None: it runs anywhere."""
        return None

    def describe(self) -> str:
        """Says what is not isolated."""
        return (
            "none (NO SANDBOX, chosen on purpose): programs the policy steers run on the host as this user and can "
            "read the bundle's verifiers and answer keys, reach loopback services and signal this process; "
            "only their environment is allowlisted"
        )

    def prepare(self, program: Program) -> Prepared:
        """``program``'s own argv under its rlimits."""
        return Prepared(
            limited_argv(list(program.argv), program.limits, None),
            dict(program.env),
            program.cwd,
            breach=lambda returncode: signal_breach(returncode, program.limits),
        )
