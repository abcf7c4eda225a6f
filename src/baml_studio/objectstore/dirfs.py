"""Filesystem steps of the directory bucket: staging with fsync, durable renames, parent
directories, pruning and positional reads. Every function raises ``OSError``; the adapter wraps it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stage(tmp_dir: Path, data: bytes) -> Path:
    """Write ``data`` to a fresh file in ``tmp_dir`` and fsync it; return its path."""
    path = tmp_dir / f"{uuid.uuid4().hex}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        discard(path)
        raise
    os.close(fd)
    return path


def discard(path: Path) -> None:
    """Best-effort unlink of a staging file (already renamed away after a commit)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def sweep_stale(tmp_dir: Path, older_than: float) -> None:
    """Best-effort removal of staging files last modified before ``older_than`` (Unix time)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp_dir):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < older_than:
                    os.unlink(entry.path)


def lstat_or_none(path: Path) -> os.stat_result | None:
    """``os.lstat`` or ``None`` when nothing is there (or a parent is not a directory)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_regular(path: Path) -> bool:
    found = lstat_or_none(path)
    return found is not None and stat.S_ISREG(found.st_mode)


def make_parents(tree: Path, segments: list[str], *, replace_files: bool) -> Path | None:
    """Create the directories ``tree/segments[0]/.../segments[-2]``, fsyncing each new entry.

    A regular file in the way is removed when ``replace_files`` (an orphan sidecar), otherwise
    its path is returned and nothing more is created.
    """
    current = tree
    for segment in segments[:-1]:
        current = current / segment
        found = lstat_or_none(current)
        if found is not None and stat.S_ISDIR(found.st_mode):
            continue
        if found is not None:
            if not replace_files:
                return current
            os.unlink(current)
        os.mkdir(current, 0o755)
        fsync_dir(current.parent)
    return None


def make_dirs(tree: Path, segments: list[str]) -> bool:
    """Create the directories ``tree/segments[0]/.../segments[-2]`` (fsyncing each new entry),
    tolerating concurrent creators; False, removing nothing, if a non-directory is in the way."""
    current = tree
    for segment in segments[:-1]:
        current = current / segment
        found = lstat_or_none(current)
        if found is None:
            try:
                os.mkdir(current, 0o755)
            except FileExistsError:
                found = lstat_or_none(current)
            else:
                fsync_dir(current.parent)
                continue
        if found is None or not stat.S_ISDIR(found.st_mode):
            return False
    return True


def clear_orphan_dir(path: Path) -> bool:
    """Remove an empty directory at ``path``; False if it holds anything."""
    try:
        os.rmdir(path)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def remove_tree(path: Path) -> None:
    """Remove a directory of orphan sidecars."""
    shutil.rmtree(path)


def prune_empty(tree: Path, leaf_parent: Path) -> None:
    """Remove empty directories from ``leaf_parent`` up to (not including) ``tree``."""
    current = leaf_parent
    while current != tree and tree in current.parents:
        try:
            os.rmdir(current)
        except OSError:
            return
        current = current.parent
    with contextlib.suppress(OSError):
        fsync_dir(current)


def pread_all(fd: int, offset: int, length: int) -> bytes:
    """Read exactly ``length`` bytes at ``offset`` (fewer only at end of file)."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)
