"""The ``bwrap`` sandbox backend: bubblewrap (Debian's ``bubblewrap``), with a cgroup and rlimits for limits.

Why bubblewrap: it is one small setuid-free program made for exactly this (Flatpak's, and what Codex and Claude
Code use on Linux), its mounts are an explicit list, and it starts in about 25 ms here, against a few seconds for a
container. What a program sees in it:

- files: the system's folders read-only (``/usr``, ``/bin``, ``/lib*``, ``/sbin``), a short list of ``/etc``
  files (users, name resolution, certificates, the loader's cache; never ``/etc/shadow``), the interpreter it
  runs on, what its ``Program`` lists as readable (read-only) and writable; its private folders and ``/tmp``
  as fresh tmpfs of ``disk_mb`` each; a ``/proc`` of its own PID namespace and a minimal ``/dev``. Nothing else:
  not the bundle folder (only the files an env declares), not the server's scratch, not other episodes'.
- processes: its own PID namespace (the server and other episodes are not there to read or signal), a user
  namespace where it is uid 1000 with no capabilities and may make no user namespace of its own (the door most
  kernel privilege escalations go through; bubblewrap 0.8 and newer), its own IPC and UTS namespaces, a new session (no
  terminal to inject keys into), killed with the server (``--die-with-parent``) and everything in it killed at
  once when its first process ends.
- network: its own network namespace with only ``lo`` (``network: host`` shares the host's, on purpose).
- limits: ``agentenv.sandbox.limits`` (a cgroup for memory and processes, rlimits for CPU time and file size).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from agentenv.sandbox.limits import Cgroup, cgroup_support, limited_argv
from agentenv.sandboxing import Prepared, Program, signal_breach

__all__ = ["BwrapBackend"]

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "passwd", "group", "hosts", "host.conf", "nsswitch.conf", "resolv.conf", "gai.conf", "localtime", "timezone",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "alternatives", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "mime.types", "protocols", "services", "os-release", "debian_version", "bash.bashrc", "profile",
    "inputrc", "terminfo", "gitconfig", "python3", "xdg",
)  # fmt: skip
UID = 1000
_MB = 1024 * 1024


@functools.cache
def _interpreter_paths() -> tuple[str, ...]:
    """The folders the interpreter agentenv runs on needs to start (its base prefix, where it is not under /usr)."""
    found = sorted({os.path.realpath(p) for p in (sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))})
    kept = [p for i, p in enumerate(found) if not any(p.startswith(q + "/") for q in found[:i])]
    return tuple(p for p in kept if not p.startswith(tuple(s + "/" for s in SYSTEM)))


@functools.cache
def _interpreter_links() -> tuple[tuple[str, str], ...]:
    """The symlinks from ``sys.executable`` to the interpreter, as (link, target) pairs: a venv's ``python`` may
    reach it through a folder of links (``uv venv --python`` of a pyenv or nox link) that is not bound, so the
    sandbox gets each link made again, and never the folder it is in."""
    links, path = [], os.path.abspath(sys.executable)
    for _ in range(40):  # the kernel's own limit on a chain of links
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        links.append((path, target))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return tuple(links)


@functools.cache
def _forbids_nested_userns(executable: str) -> bool:
    """Whether this bwrap can forbid the sandbox making user namespaces (``--disable-userns``: bubblewrap 0.8+)."""
    path = shutil.which(executable)
    if path is None:
        return False
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in done.stdout


class BwrapBackend:
    """Runs each ``Program`` in its own bubblewrap sandbox (see the module docstring)."""

    name = "bwrap"
    isolates_processes = True

    def __init__(self, executable: str = "bwrap") -> None:
        self.executable = executable

    @functools.cache  # noqa: B019  # one backend per process, checked once
    def problem(self) -> str | None:
        """Why bwrap cannot run here (not installed, no namespaces), with the fix; None when it can."""
        path = shutil.which(self.executable)
        fix = "install bubblewrap (apt-get install bubblewrap), or run without a sandbox on purpose (--no-sandbox)"
        if path is None:
            return f"bwrap (bubblewrap) is not installed: {fix}"
        argv = [path, *self._base_args(Program(("/bin/true",), {}, Path("/"))), "--", "/bin/true"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not run ({exc}): {fix}"
        if done.returncode != 0:
            why = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            return f"bwrap cannot make a sandbox here ({why[0]}; user, PID and network namespaces are needed): {fix}"
        return None

    def describe(self) -> str:
        """What it isolates and which limits are in force."""
        support = cgroup_support()
        cgroups = "NO memory or process limits (no cgroup this process may write)"
        if support:
            cgroups = f"memory and process limits by cgroup {support[0]}"
        nested = "no nested user namespaces"
        if not _forbids_nested_userns(self.executable):
            nested = "nested user namespaces ALLOWED (bubblewrap older than 0.8: upgrade it to forbid them)"
        return (
            "bwrap: own mount, PID, user, IPC, UTS and network namespaces, system folders read-only, no capabilities, "
            f"{nested}; {cgroups}; CPU time and file size by rlimit"
        )

    def prepare(self, program: Program) -> Prepared:
        """bwrap's argv for ``program``, inside its cgroup and rlimits."""
        cgroup = Cgroup(program.limits, program.name)
        argv = [self.executable, *self._base_args(program), "--", *program.argv]

        def breach(returncode: int | None) -> str | None:
            return cgroup.breach() or signal_breach(returncode, program.limits)

        return Prepared(
            limited_argv(argv, program.limits, cgroup), dict(program.env), program.cwd, cgroup.remove, breach
        )

    def _base_args(self, program: Program) -> list[str]:
        args = ["--unshare-all", "--unshare-user", "--uid", str(UID), "--gid", str(UID), "--cap-drop", "ALL"]
        args += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if _forbids_nested_userns(self.executable):
            args.append("--disable-userns")
        if program.network == "host":
            args.append("--share-net")
        if program.init:
            args.append("--as-pid-1")
        for top in SYSTEM:
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for name in ETC:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        size = [] if program.limits.disk_mb is None else ["--size", str(program.limits.disk_mb * _MB)]
        args += [*size, "--tmpfs", "/tmp"]
        for path in _interpreter_paths():
            args += ["--ro-bind", path, path]
        for path in program.readable:
            args += ["--ro-bind", str(path), str(path)]
        for path in program.writable:
            args += ["--bind", str(path), str(path)]
        for path in program.private:
            args += [*size, "--tmpfs", str(path)]
        bound = [*SYSTEM, *_interpreter_paths(), *map(str, (*program.readable, *program.writable, *program.private))]
        for link, target in _interpreter_links():
            if not any(link == b or link.startswith(b.rstrip("/") + "/") for b in bound):
                args += ["--symlink", target, link]  # after the tmpfs it may lie in (/tmp): made inside it
        args += ["--dir", str(program.cwd), "--chdir", str(program.cwd)]
        return args
