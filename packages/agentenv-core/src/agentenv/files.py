"""Files agentenv writes: each whole or not at all, a set of them with a manifest last, a folder one writer at a time.

A file is written to a temporary file beside it (unnamed until it is whole where Linux's ``O_TMPFILE``
allows, else a unique hidden name), flushed to disk, renamed over its final name and the folder flushed
too: after a crash or a ``SIGKILL`` the final name holds the old file or the new one, whole, never part
of either. A log of lines (``agentenv.record``'s shards) is appended to instead: ``open_log`` makes a new
file durable under its name, ``append`` writes each line in one call and flushes it to disk, so a reader
finds whole lines and at most one unfinished last line, never a line torn amid others.
A set of files that belong together (a verl dataset:
a parquet file per split and ``agent_loop.yaml``) is staged whole, the old manifest removed, the files
renamed, and a manifest listing each file's size and SHA-256 written last: a manifest that matches the
files is a whole set. ``locked`` holds a folder for one process at a time (``flock`` on the folder: the kernel
lets go of it when the holder dies, however it dies), and lets its holder clear temporary files a killed
writer left behind.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Final

from agentenv.errors import AgentEnvError

__all__ = [
    "MANIFEST",
    "TEMP_SUFFIX",
    "FolderBusy",
    "append",
    "locked",
    "open_log",
    "staged",
    "write_all",
    "write_file",
    "write_set",
]

TEMP_SUFFIX: Final = ".agentenv-tmp"  # every temporary file ends so: what a lock holder may clear
MANIFEST: Final = "manifest.json"

Writer = Callable[[BinaryIO], None]  # writes a file's bytes to the file it is given (pyarrow, a JSONL loop...)


class FolderBusy(AgentEnvError):
    """Another process holds the folder (``locked``)."""


def write_file(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, durable when this returns."""
    with staged(path) as file:
        file.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def staged(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A new file to write; when the block ends without error it becomes ``path``, whole and durable.

    On an error nothing is left and ``path`` is as it was.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    folder = _open_folder(final.parent)
    try:
        with _Temporary(final, folder) as temporary:
            yield temporary.file
            os.replace(temporary.name(), final)
        os.fsync(folder)
    finally:
        os.close(folder)


def write_set(
    folder: str | os.PathLike[str],
    files: Mapping[str, Writer | str | bytes],
    *,
    about: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Write ``files`` (name -> a writer, text or bytes) into ``folder`` as one set; the manifest goes last.

    Every file is written and flushed before any is renamed; the old ``manifest.json`` is removed first and
    the new one, listing each file's bytes and SHA-256 (and ``about``), written after the last rename. An
    error before the renames leaves the folder as it was. ``progress`` is called with each name once its
    file is written. Returns each name's final path.
    """
    root = Path(folder)
    for name in files:
        if Path(name).name != name or name in (".", "..", MANIFEST):
            raise ValueError(f"{name!r} is not a file name of its own in {root}: a set holds files, not folders")
    root.mkdir(parents=True, exist_ok=True)
    fd = _open_folder(root)
    try:
        with contextlib.ExitStack() as stack:
            ready: dict[str, _Temporary] = {}
            for name, content in files.items():
                temporary = ready[name] = stack.enter_context(_Temporary(root / name, fd))
                if callable(content):
                    content(temporary.file)
                else:
                    temporary.file.write(content.encode() if isinstance(content, str) else content)
                if progress is not None:
                    progress(name)
            named = {name: temporary.name() for name, temporary in ready.items()}
            listed = {name: _digest(path) for name, path in named.items()}
            with contextlib.suppress(FileNotFoundError):
                (root / MANIFEST).unlink()  # from here to the new manifest, no manifest claims a whole set
            os.fsync(fd)
            for name, path in named.items():
                os.replace(path, root / name)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_file(root / MANIFEST, json.dumps({**(about or {}), "files": listed}, indent=2, sort_keys=True) + "\n")
    return {name: root / name for name in files}


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written (a write may take fewer bytes than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_log(path: str | os.PathLike[str]) -> int:
    """Create ``path`` (a file that must not exist yet) for appending; its name is durable when this returns.

    Returns the descriptor (``O_APPEND``, not inherited by child processes). A log is never reopened: a new
    writer starts a new file, so an unfinished last line a killed writer left stays the last line of its file.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
    folder = _open_folder(final.parent)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return fd


def append(fd: int, lines: list[bytes]) -> None:
    """Append each of ``lines`` (each ending in a newline) with one write of its own, then flush them to disk."""
    for line in lines:
        write_all(fd, line)
    getattr(os, "fdatasync", os.fsync)(fd)  # macOS has no fdatasync


@contextlib.contextmanager
def locked(folder: str | os.PathLike[str], flag: str) -> Iterator[None]:
    """Hold ``folder`` for this process while the block runs; ``FolderBusy`` if another process holds it.

    ``flag`` names the option that chose the folder (``--out``), for the message. Temporary files a killed
    writer left in the folder are removed once it is held.
    """
    import fcntl  # POSIX: agentenv runs its envs and servers on Linux and macOS

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))  # the folder itself: no lock file left in it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderBusy(
                f"{flag} {root} is being written by another agentenv process; wait for it to finish, or give another "
                f"{flag}"
            ) from None
        for leftover in root.glob(f".*{TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                leftover.unlink()
        yield
    finally:
        os.close(fd)  # closing the descriptor lets go of the lock


class _Temporary:
    """A file being written beside ``final``: unnamed until it is whole (Linux's ``O_TMPFILE``), so a writer
    killed before ``name()`` leaves nothing; elsewhere a hidden file with a name no other writer uses.

    ``name()`` flushes it to disk and returns its (temporary) name; on an error it is removed.
    """

    def __init__(self, final: Path, folder: int) -> None:
        self.final = final
        self.folder = folder
        self.path: Path | None = None
        unnamed = getattr(os, "O_TMPFILE", 0) if os.path.isdir("/proc/self/fd") else 0
        fd = -1
        if unnamed:
            with contextlib.suppress(OSError):  # a filesystem without unnamed files: a named one, then
                fd = os.open(final.parent, unnamed | os.O_WRONLY, 0o666)
        while fd < 0:
            self.path = self._unused()
            with contextlib.suppress(FileExistsError):
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        self.file: BinaryIO = os.fdopen(fd, "wb")

    def _unused(self) -> Path:
        return self.final.with_name(f".{self.final.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")

    def name(self) -> Path:
        self.file.flush()
        os.fsync(self.file.fileno())
        while self.path is None:
            candidate = self._unused()
            try:  # linkat(AT_SYMLINK_FOLLOW) through /proc: the unnamed file gets its name
                os.link(f"/proc/self/fd/{self.file.fileno()}", candidate.name, dst_dir_fd=self.folder)
            except FileExistsError:
                continue
            self.path = candidate
        return self.path

    def __enter__(self) -> _Temporary:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        self.file.close()
        if kind is not None and self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


def _open_folder(path: Path) -> int:
    """The folder, opened to flush its entries (a rename is durable once its folder is flushed)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _digest(path: Path) -> dict[str, Any]:
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            sha.update(chunk)
            size += len(chunk)
    return {"bytes": size, "sha256": sha.hexdigest()}
