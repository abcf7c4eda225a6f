"""The filesystem port of the writer: every durable step of a publication goes through it.

Tests subclass :class:`OsFileSystem` to inject failures at one step (a failing fsync of the
final directory, a full disk on write, a rename that fails) without touching the real OS.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeAlias

StrPath: TypeAlias = str | os.PathLike[str]
"""A path as the port takes it: hot paths pass strings (no ``Path`` built per file)."""


class FileSystem(Protocol):
    """The durable operations of atomic publication. Every method raises OSError on failure."""

    def create_new(self, path: StrPath) -> int:
        """Create ``path`` exclusively (``O_EXCL``) for writing; return the descriptor."""

    def write_all(self, fd: int, data: bytes) -> None:
        """Write every byte of ``data`` (looping over short writes)."""

    def fsync(self, fd: int) -> None: ...

    def close(self, fd: int) -> None: ...

    def rename(self, src: StrPath, dst: StrPath) -> None: ...

    def rename_new(self, src: StrPath, dst: StrPath) -> None:
        """Rename ``src`` to ``dst`` unless ``dst`` exists (``FileExistsError``, ``src``
        left in place): the final-path recheck and the rename as one step."""

    def fsync_dir(self, path: StrPath) -> None: ...

    def mkdir(self, path: StrPath) -> None:
        """Create one directory; raises FileExistsError if it exists."""

    def unlink(self, path: StrPath) -> None: ...

    def free_bytes(self, path: StrPath) -> int:
        """Bytes available to an unprivileged writer on the filesystem holding ``path``."""

    def sync_filesystem(self, path: StrPath) -> None:
        """Make every write so far on the filesystem holding ``path`` durable (``syncfs``):
        file data, metadata and directory entries. One barrier for a batch of files."""


class OsFileSystem:
    """The real filesystem (POSIX)."""

    def create_new(self, path: StrPath) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: StrPath, dst: StrPath) -> None:
        os.rename(src, dst)

    def rename_new(self, src: StrPath, dst: StrPath) -> None:
        if _renameat2 is not None:
            code = _renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), RENAME_NOREPLACE)
            if code == 0:
                return
            errno_ = ctypes.get_errno()
            if errno_ not in (errno.EINVAL, errno.ENOSYS):  # else: not on this filesystem
                raise OSError(errno_, os.strerror(errno_), os.fspath(dst))
        if os.path.lexists(dst):  # no atomic form: recheck, then rename
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst))
        os.rename(src, dst)

    def fsync_dir(self, path: StrPath) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path: StrPath) -> None:
        os.mkdir(path, 0o755)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)

    def free_bytes(self, path: StrPath) -> int:
        stats = os.statvfs(path)
        return stats.f_bavail * stats.f_frsize

    def sync_filesystem(self, path: StrPath) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _syncfs(fd)
        finally:
            os.close(fd)


RENAME_NOREPLACE = 1


def _load_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """``renameat2(2)`` through libc where it exists (Linux, glibc 2.28+); ``None`` elsewhere.
    Called with ``AT_FDCWD`` (-100) for both directories."""
    try:
        native = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    native.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    native.restype = ctypes.c_int
    return native


_renameat2 = _load_renameat2()


def _load_syncfs() -> Callable[[int], None]:
    """``syncfs(2)`` through libc where it exists (Linux); ``os.sync()`` elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        native = libc.syncfs
    except (OSError, AttributeError):
        return lambda fd: os.sync()

    def syncfs(fd: int) -> None:
        if native(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return syncfs


_syncfs = _load_syncfs()


def ensure_dirs(fs: FileSystem, top: Path, path: Path) -> None:
    """Create ``path`` and its missing parents below the existing directory ``top``.

    Each created directory is made durable by fsyncing its parent. Raises OSError.
    """
    missing: list[Path] = []
    current = path
    while current != top and not current.is_dir():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            fs.mkdir(directory)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        fs.fsync_dir(directory.parent)


def write_file_durably(fs: FileSystem, path: StrPath, data: bytes) -> None:
    """Create ``path`` exclusively, write ``data``, fsync and close. Removes it on failure."""
    fd = fs.create_new(path)
    try:
        fs.write_all(fd, data)
        fs.fsync(fd)
    except BaseException:
        fs.close(fd)
        discard(fs, path)
        raise
    fs.close(fd)


def write_file(fs: FileSystem, path: StrPath, data: bytes) -> None:
    """Create ``path`` exclusively and write ``data`` without an fsync (the caller syncs a
    whole batch with :meth:`FileSystem.sync_filesystem`). Removes it on failure."""
    fd = fs.create_new(path)
    try:
        fs.write_all(fd, data)
    except BaseException:
        fs.close(fd)
        discard(fs, path)
        raise
    fs.close(fd)


def discard(fs: FileSystem, path: StrPath) -> None:
    """Best-effort unlink of a temp file; a leftover is counted by the next physical scan."""
    with contextlib.suppress(OSError):
        fs.unlink(path)
