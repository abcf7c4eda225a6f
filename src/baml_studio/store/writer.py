"""The writer of one process stream: ``StreamStore.open(root, euid, budget)``.

Open takes ``profiles-v1.lock`` shared (blocking, so it waits out a running clean), claims the
stream in the process-global set, takes ``stream.lock`` exclusive (non-blocking: held means
``StreamInUse``), finds the highest well-formed sequence of each plane, verifies that file, and
fsyncs both plane directories. Each plane then publishes dense sequences from high water + 1.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from baml_studio.format.cas import encode_cas_object
from baml_studio.format.ids import value_cid
from baml_studio.store.config import DiskBudget
from baml_studio.store.errors import (
    CorruptHighWater,
    StoreClosed,
    StoreFailureReason,
    StoreIoError,
    StoreOpenError,
    StreamInUse,
    reason_for_oserror,
)
from baml_studio.store.fsops import FileSystem, OsFileSystem, StrPath, ensure_dirs
from baml_studio.store.layout import U64_MAX, Plane, StoreLayout, ensure_gitignore
from baml_studio.store.locks import (
    FileLock,
    LockContended,
    claim_stream,
    release_stream,
    stream_key,
)
from baml_studio.store.publish import Exists, Publisher, Written
from baml_studio.store.results import (
    AdmissionGate,
    CasResult,
    Committed,
    Conflict,
    Indeterminate,
    IndeterminateToken,
    Lost,
    PublicationKind,
    Published,
    PublishResult,
    Reused,
    StreamHighWater,
)
from baml_studio.store.segments import SegmentProblem, plane_high_water

_PLANE_KIND = {Plane.META: PublicationKind.META, Plane.DATA: PublicationKind.DATA}


class StreamStore:
    """An open, exclusively held process stream. Use :meth:`open`; close it (or use ``with``)."""

    def __init__(
        self,
        layout: StoreLayout,
        euid: bytes,
        publisher: Publisher,
        high_water: StreamHighWater,
        held: tuple[FileLock, FileLock],
    ) -> None:
        self._layout = layout
        self._euid = euid
        self._publisher = publisher
        self._high_water = {Plane.META: high_water.meta, Plane.DATA: high_water.data}
        self._held: tuple[FileLock, FileLock] | None = held
        self._key = stream_key(layout.root, euid)
        self._mutex = threading.Lock()

    @classmethod
    def open(
        cls,
        root: Path,
        euid: bytes,
        budget: DiskBudget | None = None,
        *,
        fs: FileSystem | None = None,
    ) -> StreamStore:
        """Open stream ``euid`` under ``root`` for writing.

        Raises StreamInUse, CorruptHighWater, or StoreOpenError (with a StoreFailureReason).
        """
        if len(euid) != 16:
            raise ValueError(f"a process euid is 16 bytes, got {len(euid)}")
        layout = StoreLayout(Path(root))
        filesystem = fs if fs is not None else OsFileSystem()
        try:
            layout.root.parent.mkdir(parents=True, exist_ok=True)
            ensure_gitignore(layout.root)
            lease = FileLock.acquire(layout.lease_lock, exclusive=False)
        except OSError as exc:
            raise StoreOpenError(reason_for_oserror(exc), f"{layout.lease_lock}: {exc}") from exc
        try:
            stream_lock, high_water = _claim(layout, euid, filesystem)
        except BaseException:
            lease.release()
            raise
        publisher = Publisher(layout, filesystem, budget)
        return cls(layout, euid, publisher, high_water, (lease, stream_lock))

    @property
    def root(self) -> Path:
        return self._layout.root

    @property
    def euid(self) -> bytes:
        return self._euid

    @property
    def high_water(self) -> StreamHighWater:
        return StreamHighWater(self._high_water[Plane.META], self._high_water[Plane.DATA])

    @property
    def gate(self) -> AdmissionGate:
        """``GATE_OPEN`` (0), ``GATE_DISK`` (1) or ``GATE_UNAVAILABLE`` (2); latched for life."""
        return self._publisher.gate

    @property
    def indeterminate(self) -> IndeterminateToken | None:
        return self._publisher.indeterminate

    @property
    def closed(self) -> bool:
        return self._held is None

    def publish_meta(
        self, encode: Callable[[int], bytes], *, terminal: bool = False
    ) -> PublishResult:
        """Publish the next meta segment; ``encode(sequence)`` returns the whole file's bytes.

        ``terminal=True`` grants one attempt past a latched gate (the budget is still checked).
        """
        return self._publish_segment(Plane.META, encode, terminal)

    def publish_data(self, encode: Callable[[int], bytes]) -> PublishResult:
        """Publish the next data segment; ``encode(sequence)`` returns the whole file's bytes."""
        return self._publish_segment(Plane.DATA, encode, False)

    def publish_cas(self, codec: int, body: bytes) -> CasResult:
        """Publish a CAS object. An existing object is re-verified byte for byte, never replaced."""
        self._check_open()
        raw = encode_cas_object(codec, body)
        cid = value_cid(codec, body)
        final = self._layout.cas_path(cid)
        refusal = self._publisher.refusal()
        if refusal is not None:
            return refusal
        existing = _verify_existing(final, raw, cid)
        if existing is not None:
            return existing
        attempt = self._publisher.publish(PublicationKind.CAS, final, lambda: raw)
        if isinstance(attempt, Written):
            return Published(cid)
        if isinstance(attempt, Exists):
            verified = _verify_existing(final, raw, cid)
            return verified if verified is not None else Lost(StoreFailureReason.PATH_CONFLICT)
        return attempt

    def publish_cas_batch(self, items: Sequence[tuple[int, bytes]]) -> list[CasResult]:
        """Publish many CAS objects with one group commit; one result per item, in order.

        Same outcomes as :meth:`publish_cas` item by item (existing objects are re-verified,
        never replaced), but two ``syncfs`` barriers and one ledger update for the whole batch
        instead of four fsyncs per object.
        """
        self._check_open()
        results: list[CasResult | None] = [None] * len(items)
        pending: list[tuple[int, bytes, bytes, str]] = []
        seen: dict[bytes, int] = {}
        cids = [value_cid(codec, body) for codec, body in items]
        for index, (codec, body) in enumerate(items):
            cid = cids[index]
            if cid in seen:
                continue
            raw = encode_cas_object(codec, body, cid)
            final = self._layout.cas_path_str(cid)  # a string: no Path built per object
            seen[cid] = index
            existing = _verify_existing(final, raw, cid)  # one lstat: None for a new object
            if existing is not None:
                results[index] = existing
            else:
                pending.append((index, raw, cid, final))
        attempts = self._publisher.publish_batch(
            PublicationKind.CAS, [(final, raw) for _, raw, _, final in pending]
        )
        for (index, raw, cid, final), attempt in zip(pending, attempts, strict=True):
            if isinstance(attempt, Written):
                results[index] = Published(cid)
            elif isinstance(attempt, Exists):
                verified = _verify_existing(final, raw, cid)
                results[index] = verified or Lost(StoreFailureReason.PATH_CONFLICT)
            else:
                results[index] = attempt
        for index in range(len(items)):
            if results[index] is None:
                results[index] = results[seen[cids[index]]]
        return [r for r in results if r is not None]

    def resolve_indeterminate(self) -> bool:
        """Retry the durability steps of an indeterminate publication.

        Returns True when nothing is indeterminate any more (publication is unblocked).
        """
        self._check_open()
        return self._publisher.resolve()

    def close(self) -> None:
        """Release the stream. An indeterminate publication gets one more resolve attempt."""
        with self._mutex:
            held, self._held = self._held, None
        if held is None:
            return
        try:
            self._publisher.resolve()
        finally:
            lease, stream_lock = held
            release_stream(self._key)
            stream_lock.release()
            lease.release()

    def __enter__(self) -> StreamStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _publish_segment(
        self, plane: Plane, encode: Callable[[int], bytes], terminal: bool
    ) -> PublishResult:
        self._check_open()
        with self._mutex:
            current = self._high_water[plane]
            if current >= U64_MAX:
                return Lost(StoreFailureReason.SEQUENCE_EXHAUSTED)
            sequence = current + 1
            final = self._layout.segment_path(self._euid, plane, sequence)
            attempt = self._publisher.publish(
                _PLANE_KIND[plane],
                final,
                lambda: encode(sequence),
                sequence=sequence,
                terminal=terminal,
            )
            if isinstance(attempt, Exists):
                return Lost(StoreFailureReason.PATH_CONFLICT)
            if isinstance(attempt, Written):
                self._high_water[plane] = sequence
                return Committed(sequence)
            if isinstance(attempt, Indeterminate):
                self._high_water[plane] = sequence  # an indeterminate file owns its number
            return attempt

    def _check_open(self) -> None:
        if self._held is None:
            raise StoreClosed(f"stream {self._euid.hex()} under {self._layout.root} is closed")


StoreWriter = StreamStore


def _claim(layout: StoreLayout, euid: bytes, fs: FileSystem) -> tuple[FileLock, StreamHighWater]:
    """Under the lease: claim (root, euid), lock stream.lock, open-scan both planes."""
    try:
        ensure_dirs(fs, layout.root.parent, layout.tmp_dir)
        for plane in Plane:
            ensure_dirs(fs, layout.root.parent, layout.plane_dir(euid, plane))
    except OSError as exc:
        raise StoreOpenError(reason_for_oserror(exc), f"{layout.root}: {exc}") from exc
    key = stream_key(layout.root, euid)
    if not claim_stream(key):
        raise StreamInUse(layout.root, euid)
    try:
        stream_lock = FileLock.acquire(layout.stream_lock(euid), exclusive=True, blocking=False)
    except LockContended as exc:
        release_stream(key)
        raise StreamInUse(layout.root, euid) from exc
    except OSError as exc:
        release_stream(key)
        raise StoreOpenError(reason_for_oserror(exc), f"{layout.stream_lock(euid)}: {exc}") from exc
    try:
        high_water = _open_scan(layout, euid, fs)
    except BaseException:
        stream_lock.release()
        release_stream(key)
        raise
    return stream_lock, high_water


def _open_scan(layout: StoreLayout, euid: bytes, fs: FileSystem) -> StreamHighWater:
    marks: dict[Plane, int] = {}
    for plane in Plane:
        try:
            marks[plane] = plane_high_water(layout, euid, plane)
            fs.fsync_dir(layout.plane_dir(euid, plane))
        except SegmentProblem as problem:
            raise CorruptHighWater(problem.path, problem.error) from problem.error
        except StoreIoError as exc:
            raise StoreOpenError(exc.reason, str(exc)) from exc
        except OSError as exc:
            raise StoreOpenError(reason_for_oserror(exc), f"{layout.root}: {exc}") from exc
    return StreamHighWater(marks[Plane.META], marks[Plane.DATA])


def _verify_existing(final: StrPath, raw: bytes, cid: bytes) -> Reused | Conflict | Lost | None:
    """Re-verify an existing CAS object against the bytes we would write; None if absent.

    One ``lstat`` decides what is there: another writer's object can appear at any moment, and
    a check made of several looks (is it a link, a file, does it exist) could see it absent at
    one and present at the next, and call a good object a conflict. Objects appear complete
    (rename) and are never rewritten, so what the look found is what is read.
    """
    try:
        found = os.lstat(final)
        if not stat.S_ISREG(found.st_mode) or found.st_size != len(raw):
            return Conflict(cid)  # a link, a directory, or other bytes
        with open(final, "rb") as file:
            return Reused(cid) if file.read() == raw else Conflict(cid)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Lost(reason_for_oserror(exc))
