"""Filesystem steps of the directory bucket: staging, durability barriers, parent directories,
pruning and positional reads. Every function raises ``OSError``; the adapter wraps it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from baml_studio.store.fsops import OsFileSystem


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stage(tmp_dir: Path, data: bytes) -> Path:
    """Write ``data`` to a fresh file in ``tmp_dir``; return its path. Not synced: the caller
    calls :func:`fsync_file` before anything durable depends on it."""
    path = tmp_dir / f"{uuid.uuid4().hex}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        discard(path)
        raise
    os.close(fd)
    return path


def sync_filesystem(path: Path) -> None:
    """Make every write so far on the filesystem holding ``path`` durable: file data,
    metadata and directory entries (``syncfs``; ``sync`` where it does not exist)."""
    OsFileSystem().sync_filesystem(path)


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


def lstat_or_none(path: Path | str) -> os.stat_result | None:
    """``os.lstat`` or ``None`` when nothing is there (or a parent is not a directory)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_regular(path: Path) -> bool:
    found = lstat_or_none(path)
    return found is not None and stat.S_ISREG(found.st_mode)


def make_parents(tree: Path, segments: list[str], *, replace_files: bool) -> Path | None:
    """Create the directories ``tree/segments[0]/.../segments[-2]`` (not synced: the caller's
    barrier makes them durable).

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
    return None


def make_dirs(tree: Path, segments: list[str]) -> bool:
    """Create the directories ``tree/segments[0]/.../segments[-2]`` (not synced), tolerating
    concurrent creators; False, removing nothing, if a non-directory is in the way."""
    current = os.fspath(tree)  # plain strings: this runs for every put
    for segment in segments[:-1]:
        current = f"{current}/{segment}"
        found = lstat_or_none(current)
        if found is None:
            try:
                os.mkdir(current, 0o755)
            except FileExistsError:
                found = lstat_or_none(current)
            else:
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


class GroupSync:
    """A durability barrier shared by concurrent callers (group commit).

    :meth:`sync` returns once everything its caller wrote before calling is durable. One
    ``sync`` call (``syncfs`` of the bucket's filesystem) runs at a time and serves every caller
    that was waiting when it started; a caller that arrives while one runs waits for the next,
    since the running one may have started before its writes. A failed sync fails exactly the
    callers it served, with an ``OSError``."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._cond = threading.Condition()
        self._started = 0
        """Generation of the last sync started."""
        self._done = 0
        """Generation of the last sync finished (they finish in order)."""
        self._running = False
        self._failures: dict[int, BaseException] = {}

    def sync(self) -> None:
        own: BaseException | None = None
        with self._cond:
            mine = self._started + 1  # the first sync to start from now on covers our writes
            while self._done < mine:
                if self._running:
                    self._cond.wait()
                    continue
                self._started += 1
                generation, self._running = self._started, True
                self._cond.release()
                try:
                    self._sync()
                except BaseException as exc:  # every caller this sync served fails with it
                    own = exc
                self._cond.acquire()
                self._running, self._done = False, generation
                if own is not None:
                    self._failures[generation] = own
                for old in [g for g in self._failures if g < generation - _KEPT_FAILURES]:
                    del self._failures[old]
                self._cond.notify_all()
            failure = self._failures.get(mine)
        if failure is None:
            return
        if failure is own and not isinstance(own, OSError):
            raise own  # an interrupt in the caller that ran the sync
        if isinstance(failure, OSError):
            error = OSError(failure.errno, failure.strerror or str(failure), failure.filename)
            raise error from failure
        raise OSError(errno.EIO, f"the shared sync failed: {failure!r}") from failure


_KEPT_FAILURES = 1024
"""Failed generations remembered, for callers that wake late."""
