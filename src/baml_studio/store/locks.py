"""Advisory file locks (``flock``) and the process-global set of open streams.

Lock order, always: ``profiles-v1.lock`` (shared) → ``stream.lock`` (exclusive) →
``publish.lock`` (exclusive, per publication). ``flock`` locks belong to an open file
description, so two descriptors in one process exclude each other just like two processes.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType


class LockContended(Exception):
    """A non-blocking lock attempt found the lock held; callers map it to a typed error."""


class FileLock:
    """One held ``flock`` on one descriptor. ``release()`` is idempotent."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(
        cls, path: Path, *, exclusive: bool, blocking: bool = True, create: bool = True
    ) -> FileLock:
        """Open (creating if asked) and lock ``path``. Raises LockContended or OSError."""
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        operation = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (
            0 if blocking else fcntl.LOCK_NB
        )
        try:
            fcntl.flock(fd, operation)
        except BlockingIOError as exc:
            os.close(fd)
            raise LockContended(str(path)) from exc
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def is_locked_by_other(path: Path) -> bool | None:
    """Liveness probe: True if a shared non-blocking lock on ``path`` would block.

    None if the file does not exist. The probe never creates the file.
    """
    try:
        probe = FileLock.acquire(path, exclusive=False, blocking=False, create=False)
    except FileNotFoundError:
        return None
    except LockContended:
        return True
    probe.release()
    return False


# The process-global OPEN_STREAMS set of the reference: a second open of the same (root, euid)
# in this process fails even before the flock is tried, and readers here short-circuit liveness.
_OPEN_STREAMS: set[tuple[str, bytes]] = set()
_OPEN_STREAMS_GUARD = threading.Lock()


def stream_key(root: Path, euid: bytes) -> tuple[str, bytes]:
    return (os.path.realpath(root), euid)


def claim_stream(key: tuple[str, bytes]) -> bool:
    """Register an open stream; False if this process already has it open."""
    with _OPEN_STREAMS_GUARD:
        if key in _OPEN_STREAMS:
            return False
        _OPEN_STREAMS.add(key)
        return True


def release_stream(key: tuple[str, bytes]) -> None:
    with _OPEN_STREAMS_GUARD:
        _OPEN_STREAMS.discard(key)


def is_stream_open_here(key: tuple[str, bytes]) -> bool:
    with _OPEN_STREAMS_GUARD:
        return key in _OPEN_STREAMS
