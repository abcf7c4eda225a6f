"""Typed errors of the local profiles-v1 store.

Exception tree::

    BamlStudioError
    ├── StoreError                    a problem operating the local store (this module)
    │   ├── StoreOpenError            a writer could not open its stream; ``.reason``
    │   │   ├── StreamInUse           (root, euid) is already open here or in another process
    │   │   └── CorruptHighWater      the highest final segment of a plane does not decode
    │   ├── StoreClosed               a method was called on a closed writer (programming error)
    │   ├── StoreInUse                clean: ``profiles-v1.lock`` is held by a writer or reader
    │   ├── InvalidStoreRoot          clean: the root is not ``<...>/.baml/profiles-v1``
    │   ├── UsageScanError            the physical usage scan met a symlink or non-regular file
    │   ├── StoreNotFound             reader: the stream, segment or CAS object does not exist
    │   └── StoreIoError              an operating-system error; ``.reason``
    └── FormatError
        └── SegmentReadError          (``baml_studio.format.errors``) bytes that do not decode;
            ├── SequenceMismatch      a segment whose header sequence differs from its file name
            └── InvalidChecksum
                └── CasPathMismatch   a valid CAS object stored under another CID's path

Publication never raises for I/O failure: the writer returns ``Lost(reason)`` with a
:class:`StoreFailureReason` instead (see :mod:`baml_studio.store.results`). ``transient`` marks
errors that may go away on retry (a lock that another process holds, an OS error).
"""

from __future__ import annotations

import enum
import errno
from pathlib import Path

from baml_studio.format.errors import BamlStudioError, InvalidChecksum, SegmentReadError


class StoreFailureReason(enum.Enum):
    """Why a publication was lost or a writer could not open (``StoreFailureReason``)."""

    DISK_GUARD_EXCEEDED = "disk_guard_exceeded"
    PERMISSION_DENIED = "permission_denied"
    STORE_UNAVAILABLE = "store_unavailable"
    PATH_CONFLICT = "path_conflict"
    SEQUENCE_EXHAUSTED = "sequence_exhausted"
    STREAM_IN_USE = "stream_in_use"


_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_DENIED = frozenset({errno.EACCES, errno.EPERM})


def reason_for_oserror(exc: OSError) -> StoreFailureReason:
    """ENOSPC (and EDQUOT) → DiskGuardExceeded; EACCES/EPERM → PermissionDenied.

    Every other OS error is StoreUnavailable.
    """
    if exc.errno in _DISK_FULL:
        return StoreFailureReason.DISK_GUARD_EXCEEDED
    if exc.errno in _DENIED:
        return StoreFailureReason.PERMISSION_DENIED
    return StoreFailureReason.STORE_UNAVAILABLE


class StoreError(BamlStudioError):
    """A problem operating the local store."""

    transient = False


class StoreOpenError(StoreError):
    """A writer could not open its stream."""

    def __init__(self, reason: StoreFailureReason, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason


class StreamInUse(StoreOpenError):
    """The stream is already open, in this process or another one (one writer per stream)."""

    transient = True

    def __init__(self, root: Path, euid: bytes) -> None:
        super().__init__(
            StoreFailureReason.STREAM_IN_USE,
            f"stream {euid.hex()} under {root} is already open; each process mints its own "
            "stream id, so close the other writer or use a fresh euid",
        )
        self.root = root
        self.euid = euid


class CorruptHighWater(StoreOpenError):
    """The highest final segment of a plane is corrupt, so the stream cannot resume safely."""

    def __init__(self, path: Path, cause: BamlStudioError) -> None:
        super().__init__(
            StoreFailureReason.STORE_UNAVAILABLE,
            f"highest segment {path} is corrupt ({cause}); "
            "remove it or run `baml-studio store clean`",
        )
        self.path = path
        self.cause = cause


class StoreClosed(StoreError):
    """The writer was used after ``close()``."""


class StoreInUse(StoreError):
    """``baml clean`` found ``profiles-v1.lock`` held by an open writer or reader."""

    transient = True

    def __init__(self, lock_path: Path) -> None:
        super().__init__(
            f"the store is in use ({lock_path} is locked); stop running profilers and readers "
            "and retry"
        )
        self.lock_path = lock_path


class InvalidStoreRoot(StoreError):
    """A root that clean refuses to remove."""

    def __init__(self, root: Path) -> None:
        super().__init__(
            f"refusing to clean {root}: only a directory named 'profiles-v1' whose parent is "
            "'.baml' can be cleaned"
        )
        self.root = root


class UsageScanError(StoreError):
    """The physical usage scan found something that is not a directory or regular file."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(
            f"usage scan found a {kind} at {path}; the store holds only directories and "
            "regular files, so remove it"
        )
        self.path = path
        self.kind = kind


class StoreNotFound(StoreError):
    """The requested stream, segment or CAS object does not exist."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"not found: {path}")
        self.path = path


class StoreIoError(StoreError):
    """An operating-system error while reading or cleaning the store."""

    transient = True

    def __init__(self, path: Path, exc: OSError) -> None:
        reason = reason_for_oserror(exc)
        super().__init__(f"{reason.value} at {path}: {exc.strerror or exc}")
        self.path = path
        self.reason = reason


class SequenceMismatch(SegmentReadError):
    """A segment whose header sequence is not the one in its file name."""

    def __init__(self, name_sequence: int, header_sequence: int) -> None:
        super().__init__(
            f"file name says sequence {name_sequence} but the header says {header_sequence}"
        )
        self.name_sequence = name_sequence
        self.header_sequence = header_sequence


class CasPathMismatch(InvalidChecksum):
    """A well-formed CAS object stored under a path that names a different CID."""

    def __init__(self, path_cid: bytes, object_cid: bytes) -> None:
        super().__init__(f"path names CID {path_cid.hex()} but the object is {object_cid.hex()}")
        self.path_cid = path_cid
        self.object_cid = object_cid
