"""The sandbox seam: what a program the policy steers is, and what a backend makes of it.

A ``Program`` says what to run (argv, its allowlisted environment, its working folder), what it may see (the
folders it may write, the files it may read, its network) and its ``Limits``. A ``SandboxBackend`` (bubblewrap,
the explicit ``none``, a plugin's container) turns it into a ``Prepared`` launch: the argv, environment and
working folder ``agentenv.sandbox.procs.spawn`` runs, what to clean up once it has exited, and which limit it hit.
Backends are registered by the ``agentenv_sandboxes`` hook (``agentenv.plugins.hookspecs``).
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from agentenv.errors import AgentEnvError

__all__ = [
    "LIMITS_HIT",
    "Limits",
    "Opening",
    "Prepared",
    "Program",
    "SandboxBackend",
    "SandboxUnavailable",
    "count_hit",
    "signal_breach",
]

Network = Literal["none", "host"]

LIMITS_HIT: collections.Counter[str] = collections.Counter()
"""The limits programs of this process hit, by limit (``memory``, ``process``, ``cpu_time``, ``file_size``,
``call_time``): the server's ``/metrics`` reads it (``agentenv_sandbox_limits_hit_total``)."""


class SandboxUnavailable(AgentEnvError):
    """The sandbox in force cannot run here (no bwrap, no namespaces); the message names the fix."""


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use; None: no limit of that kind.

    ``memory_mb``: resident memory of everything in it together (a cgroup); ``pids``: processes and threads
    in it together (a fork bomb stops there); ``cpu_seconds``: CPU time of each process; ``file_mb``: the
    largest file it may write; ``disk_mb``: what its private folders may hold together; ``call_seconds``: the
    wall time of one ``bash`` call; ``output_chars``: what one ``bash`` answer keeps of the output.
    """

    memory_mb: int | None = 2048
    pids: int | None = 256
    cpu_seconds: int | None = 600
    file_mb: int | None = 1024
    disk_mb: int | None = 2048
    call_seconds: float | None = 30.0
    output_chars: int = 16_000


@dataclass(frozen=True)
class Opening:
    """A loopback TCP endpoint a sandboxed program may reach (its model proxy, its MCP server): inside, it
    connects to ``127.0.0.1:port`` as usual, and the sandbox relays that, and only that, to ``host:port``."""

    port: int
    host: str = "127.0.0.1"
    key: str | None = None  # the one API key this sandbox may present there (``relay.relayed_key``); None: any


@dataclass(frozen=True)
class Program:
    """One program launch for the policy.

    ``argv``, ``env`` (already allowlisted: ``agentenv.sandbox.program_environ``) and ``cwd`` as a process
    would get them. ``private``: folders only the sandbox sees, empty at start and gone with it (its HOME,
    TMPDIR, a ``bash`` workdir); ``writable``: host folders it may write (an agent's workdir, whose reply the
    host reads); ``readable``: files and folders it may read (the bundle files an env declares, its
    interpreter). Everything else of the host's files is hidden or read-only system folders (``/usr``).
    ``network``: ``none`` (only its own loopback, plus ``openings``) or ``host`` (the host's network, opened on
    purpose in the bundle). ``name`` names it in logs and limits; ``init``: see below.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    private: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    network: Network = "none"
    openings: tuple[Opening, ...] = ()
    limits: Limits = field(default_factory=Limits)
    name: str = "program"
    init: bool = False
    """The program is its sandbox's init (PID 1, where the backend has a PID namespace): no process in the sandbox
    can signal it, and it reaps what is orphaned there (the ``bash`` shell)."""


@dataclass
class Prepared:
    """What ``agentenv.sandbox.procs.spawn`` runs for a ``Program``, and what comes after.

    ``cleanup()`` runs once the program has exited (remove a cgroup, stop a relay); ``breach(returncode)`` says
    which limit the program hit (``"memory limit (2048 MiB)"``), or None.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    cleanup: Callable[[], None] = lambda: None
    breach: Callable[[int | None], str | None] = lambda returncode: None


@runtime_checkable
class SandboxBackend(Protocol):
    """A way to run a ``Program`` apart from the host (``bwrap``, ``none``, a plugin's)."""

    name: str
    isolates_processes: bool
    """True when each ``Program`` gets a PID namespace of its own: what it starts cannot outlive it, and the
    ``bash`` shell may kill every other process it finds."""

    def problem(self) -> str | None:
        """Why this backend cannot run here, with the fix (None: it can). Checked once, before first use."""
        ...

    def describe(self) -> str:
        """One line for the log at start: what it isolates and which limits are in force."""
        ...

    def prepare(self, program: Program) -> Prepared:
        """The launch of ``program``: argv, environment and folder for ``procs.spawn``, cleanup, breach."""
        ...


def signal_breach(returncode: int | None, limits: Limits) -> str | None:
    """The limit a process that ended with ``returncode`` hit, when its signal says so (CPU time, file size): killed
    by it (a negative code), or a shell's ``128 + signal``."""
    if returncode is None or 0 <= returncode <= 128:
        return None
    sig = -returncode if returncode < 0 else returncode - 128
    if sig == signal.SIGXCPU:
        return f"CPU time limit ({limits.cpu_seconds} s)"
    if sig == signal.SIGXFSZ:
        return f"file size limit ({limits.file_mb} MiB)"
    return None


def count_hit(said: str | None) -> str | None:
    """Count a limit said hit (``"memory limit (2048 MiB)"`` as ``memory``) in ``LIMITS_HIT``; returns ``said``."""
    if said is not None:
        LIMITS_HIT[said.split(" limit", 1)[0].strip().lower().replace(" ", "_")] += 1
    return said
