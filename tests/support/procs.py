"""The one reader of ``/proc`` the tests have: how a test finds the processes a server, a sandbox or a trainer left,
by what the kernel shows of them (command line, environment, process group, session), never by asking the code
under test. A zombie (exited, not yet waited for) or a dead entry runs nothing: it counts as gone everywhere here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
_DEAD = {"Z", "X"}


def read(pid: int, part: str) -> bytes:
    """The bytes of ``/proc/PID/PART`` (``OSError`` once the process is gone, or where it is not ours to read)."""
    return (PROC / str(pid) / part).read_bytes()


def stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name: state, parent, process group, session, ...
    (``ProcessLookupError``, an ``OSError``, once it is gone). The name is skipped by its last ``)``: a command
    may name itself with spaces and parentheses."""
    try:
        return read(pid, "stat").decode().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        return stat(pid)[0] not in _DEAD
    except OSError:
        return False


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    return not alive(pid)


def parent_of(pid: int) -> int:
    return int(stat(pid)[1])


def cmdline(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces ("" once it is gone)."""
    try:
        return read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def live(where: Callable[[int], bool]) -> list[int]:
    """The live processes for which ``where(pid)`` holds (one that ends, or hides, while ``where`` reads it is left
    out)."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if where(pid) and alive(pid):
                found.append(pid)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def running(marker: str) -> list[int]:
    """The live processes whose command line carries ``marker``: how a test finds a process a sandboxed program
    started, whose own pid is of the sandbox's PID namespace."""
    return live(lambda pid: marker.encode() in read(pid, "cmdline"))


def with_env(variable: str, value: str, *, session: int | None = None) -> list[int]:
    """The live processes whose environment has ``variable=value``, or (``session``) that are in that session."""
    needle = f"{variable}={value}".encode()
    return live(
        lambda pid: (session is not None and int(stat(pid)[3]) == session)
        or needle in read(pid, "environ").split(b"\0")
    )


def group_gone(pgid: int) -> bool:
    """Whether no process of the process group ``pgid`` is left running (a killed child the init process has not
    reaped yet is a zombie: it runs nothing)."""
    return not live(lambda pid: int(stat(pid)[2]) == pgid)


def memory(pid: int, figure: str = "VmRSS") -> int:
    """A figure of the process's ``/proc`` status, in bytes (VmRSS: held now; VmHWM: the most held since reset)."""
    for line in read(pid, "status").decode().splitlines():
        if line.startswith(figure + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no {figure}")


def listening(pid: int) -> list[int]:
    """The TCP ports process ``pid`` listens on (IPv4 and IPv6): its sockets' inodes matched against the kernel's
    tables of sockets in state LISTEN (``0A``)."""
    inodes = set()
    for link in (PROC / str(pid) / "fd").iterdir():
        try:
            target = str(link.readlink())
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("tcp", "tcp6"):
        for line in (PROC / str(pid) / "net" / table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)
