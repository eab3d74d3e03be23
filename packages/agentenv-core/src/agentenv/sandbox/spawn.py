"""Start a ``Program`` in the sandbox in force: the one way ``bash``, subprocess envs and agents start theirs."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from agentenv.sandbox import procs
from agentenv.sandbox.choice import current
from agentenv.sandboxing import Prepared, Program, SandboxBackend, count_hit

__all__ = ["Sandboxed", "program_paths", "python_paths", "spawn"]


@dataclass
class Sandboxed:
    """A program running in its sandbox: its ``procs.Child``, and how it was prepared."""

    child: procs.Child
    prepared: Prepared
    backend: SandboxBackend

    def breach(self, code: int | None = None) -> str | None:
        """The limit it hit since the last ask (``"memory limit (2048 MiB)"``), or None, counted in ``LIMITS_HIT``;
        ``code``: the exit code of a command run inside it (the shell's), else the program's own."""
        return count_hit(self.prepared.breach(self.child.returncode if code is None else code))

    async def end(self, grace: float = 0.0) -> int | None:
        """End it (``procs.Child.end``) and clean its sandbox up (a cgroup, what is left in it); its exit code."""
        code = await self.child.end(grace)
        await asyncio.to_thread(self.prepared.cleanup)
        return code


async def spawn(program: Program, *, stdin: bool = True, stderr_to_stdout: bool = False) -> Sandboxed:
    """Start ``program`` in the sandbox in force (``agentenv.sandbox.current()``; ``SandboxUnavailable`` where it
    cannot run), owned by this process (``agentenv.sandbox.procs.spawn``)."""
    backend = current()
    prepared = backend.prepare(program)
    try:
        child = await procs.spawn(
            prepared.argv, cwd=prepared.cwd, env=prepared.env, stdin=stdin, stderr_to_stdout=stderr_to_stdout
        )
    except BaseException:
        prepared.cleanup()
        raise
    return Sandboxed(child, prepared, backend)


@functools.cache
def python_paths() -> tuple[Path, ...]:
    """What a program run on this process's interpreter with its packages (``python`` in a bundle's command)
    reads: the environment's prefix and base prefix, and the folders its ``.pth`` files add (editable installs).
    Never a folder merely on ``sys.path`` (a project root there would show every bundle under it)."""
    found = {Path(sys.prefix), Path(sys.base_prefix)}
    for folder in site.getsitepackages() if hasattr(site, "getsitepackages") else []:
        for pth in Path(folder).glob("*.pth"):
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            found.update(Path(line) for line in lines if line.startswith("/") and os.path.isdir(line))
    resolved = sorted({p.resolve() for p in found})
    return tuple(p for i, p in enumerate(resolved) if not any(p.is_relative_to(q) for q in resolved[:i]))


SYSTEM = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/")


def program_paths(argv: tuple[str, ...] | list[str], path: str) -> tuple[Path, ...]:
    """What a program needs to read to start, past the system's folders: this interpreter's packages when it runs
    on it (or is a script of its environment), the ``node_modules`` folder an npm CLI lives in, else its folder."""
    if not argv:
        return ()
    found = shutil.which(argv[0], path=path) or argv[0]
    real = os.path.realpath(found)
    if real.startswith(SYSTEM) and real != os.path.realpath(sys.executable):
        return ()
    prefixes = [os.path.realpath(p) + "/" for p in (sys.prefix, sys.base_prefix)]
    if real == os.path.realpath(sys.executable) or real.startswith(tuple(prefixes)):
        return python_paths()
    parts = Path(real).parts
    if "node_modules" in parts:
        return (Path(*parts[: parts.index("node_modules") + 1]),)
    return (Path(real).parent,)
