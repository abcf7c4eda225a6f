"""``StoreReader``: read-only access to a profiles-v1 store, safe beside running writers.

Every call holds ``profiles-v1.lock`` shared for its duration (so ``clean`` cannot remove files
under it) and never takes ``publish.lock``: published files are complete or absent. Every
decoder validates the trailing SHA-256 before decoding. Bad bytes raise the format's
``SegmentReadError`` subclasses; missing files raise StoreNotFound; OS errors StoreIoError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from pathlib import Path

from baml_studio.format.cas import CasObject
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import DataSegment, MetaSegment
from baml_studio.store.errors import StoreIoError
from baml_studio.store.layout import Plane, StoreLayout, parse_stream_dir_name
from baml_studio.store.locks import FileLock, is_locked_by_other, is_stream_open_here, stream_key
from baml_studio.store.scan import CasCheck, StoreScan, check_cas, scan_store
from baml_studio.store.segments import (
    decode_cas_file,
    decode_data_file,
    decode_meta_file,
    plane_sequences,
    read_store_file,
)


class StoreReader:
    """Reads streams, segments and CAS objects under one store root."""

    def __init__(self, root: Path) -> None:
        self._layout = StoreLayout(Path(root))

    @property
    def root(self) -> Path:
        return self._layout.root

    def list_streams(self) -> list[bytes]:
        """Euids of stream directories (only 32-lowercase-hex names), sorted."""
        with self._lease():
            try:
                names = [p.name for p in self._layout.streams_dir.iterdir() if p.is_dir()]
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise StoreIoError(self._layout.streams_dir, exc) from exc
        return sorted(e for e in (parse_stream_dir_name(n) for n in names) if e is not None)

    def is_alive(self, euid: bytes) -> bool:
        """Whether a writer holds the stream: this process's open set, else a shared-lock probe.

        A forked child that inherited the lock keeps the stream looking alive (a known false
        positive).
        """
        with self._lease():
            return self._alive(euid)

    def meta_sequences(self, euid: bytes) -> list[int]:
        return self._sequences(euid, Plane.META)

    def data_sequences(self, euid: bytes) -> list[int]:
        return self._sequences(euid, Plane.DATA)

    def read_meta(self, euid: bytes, sequence: int) -> MetaSegment:
        with self._lease():
            raw = read_store_file(self._layout.segment_path(euid, Plane.META, sequence))
        return decode_meta_file(raw, euid, sequence)

    def read_data(
        self, euid: bytes, sequence: int, roots: Collection[ThreadRef] | None = None
    ) -> DataSegment:
        """One data segment; with ``roots`` only those executions' groups are decoded."""
        with self._lease():
            raw = read_store_file(self._layout.segment_path(euid, Plane.DATA, sequence))
        return decode_data_file(raw, euid, sequence, roots)

    def read_cas(self, cid: bytes) -> CasObject:
        with self._lease():
            raw = read_store_file(self._layout.cas_path(cid))
        return decode_cas_file(raw, cid)

    def scan(self) -> StoreScan:
        """Decode every file; corrupt files are listed with their errors, never fatal."""
        with self._lease():
            return scan_store(self._layout, self._alive)

    def check_cas(self) -> CasCheck:
        """Verify every CAS object's checksum, recomputed CID and path."""
        with self._lease():
            return check_cas(self._layout)

    def _alive(self, euid: bytes) -> bool:
        if is_stream_open_here(stream_key(self._layout.root, euid)):
            return True
        path = self._layout.stream_lock(euid)
        try:
            return bool(is_locked_by_other(path))
        except OSError as exc:
            raise StoreIoError(path, exc) from exc

    def _sequences(self, euid: bytes, plane: Plane) -> list[int]:
        with self._lease():
            try:
                return plane_sequences(self._layout, euid, plane)
            except OSError as exc:
                raise StoreIoError(self._layout.plane_dir(euid, plane), exc) from exc

    @contextlib.contextmanager
    def _lease(self) -> Iterator[None]:
        """``profiles-v1.lock`` shared for one call; nothing to lock if its directory is absent."""
        path = self._layout.lease_lock
        try:
            lease = FileLock.acquire(path, exclusive=False)
        except FileNotFoundError:
            yield
            return
        except PermissionError:
            try:
                lease = FileLock.acquire(path, exclusive=False, create=False)
            except FileNotFoundError:
                yield
                return
            except OSError as exc:
                raise StoreIoError(path, exc) from exc
        except OSError as exc:
            raise StoreIoError(path, exc) from exc
        with lease:
            yield
