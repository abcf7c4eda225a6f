"""Reading and validating one store file: shared by the writer's open-scan and the reader.

Every decoder validates the trailing SHA-256 before it decodes anything. On top of the format
rules the store checks that a segment's header sequence matches its file name, that its euid
matches its stream directory, and that a CAS object's CID matches its path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path

from baml_studio.format.cas import CasObject, decode_cas_object
from baml_studio.format.data import decode_data_segment
from baml_studio.format.errors import BamlStudioError, SegmentReadError
from baml_studio.format.ids import ThreadRef
from baml_studio.format.meta import decode_meta_segment
from baml_studio.format.records import DataSegment, MetaSegment
from baml_studio.store.errors import (
    CasPathMismatch,
    SequenceMismatch,
    StoreIoError,
    StoreNotFound,
)
from baml_studio.store.layout import Plane, StoreLayout, parse_segment_name


class SegmentProblem(Exception):
    """A file that failed to read or decode (internal carrier of path + typed error)."""

    def __init__(self, path: Path, error: BamlStudioError) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path
        self.error = error


def read_store_file(path: Path) -> bytes:
    """The whole file. Raises StoreNotFound, or StoreIoError (also for a non-regular file)."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            raise StoreIoError(path, OSError(errno.EINVAL, "not a regular file"))
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise StoreNotFound(path) from exc
    except OSError as exc:
        raise StoreIoError(path, exc) from exc


def decode_meta_file(raw: bytes, euid: bytes, sequence: int) -> MetaSegment:
    segment = decode_meta_segment(raw, expected_euid=euid)
    if segment.sequence != sequence:
        raise SequenceMismatch(sequence, segment.sequence)
    return segment


def decode_data_file(
    raw: bytes, euid: bytes, sequence: int, roots: Collection[ThreadRef] | None = None
) -> DataSegment:
    segment = decode_data_segment(raw, expected_euid=euid, roots=roots)
    if segment.sequence != sequence:
        raise SequenceMismatch(sequence, segment.sequence)
    return segment


def decode_cas_file(raw: bytes, cid: bytes) -> CasObject:
    obj = decode_cas_object(raw)
    if obj.cid != cid:
        raise CasPathMismatch(cid, obj.cid)
    return obj


def load_segment(
    layout: StoreLayout, euid: bytes, plane: Plane, sequence: int
) -> MetaSegment | DataSegment:
    """Read and decode one segment. Raises StoreNotFound/StoreIoError or a SegmentReadError."""
    raw = read_store_file(layout.segment_path(euid, plane, sequence))
    if plane is Plane.META:
        return decode_meta_file(raw, euid, sequence)
    return decode_data_file(raw, euid, sequence)


def plane_sequences(layout: StoreLayout, euid: bytes, plane: Plane) -> list[int]:
    """Sorted sequences of well-formed names in one plane; other names are ignored.

    A missing plane directory has no sequences. Raises OSError.
    """
    try:
        names = os.listdir(layout.plane_dir(euid, plane))
    except FileNotFoundError:
        return []
    return sorted(seq for seq in (parse_segment_name(plane, n) for n in names) if seq is not None)


def plane_high_water(layout: StoreLayout, euid: bytes, plane: Plane) -> int:
    """The highest well-formed sequence of a plane (0 if none), after verifying that file.

    Raises SegmentProblem if the highest file does not decode, StoreIoError if it cannot be
    read, OSError if the plane directory cannot be listed.
    """
    sequences = plane_sequences(layout, euid, plane)
    if not sequences:
        return 0
    highest = sequences[-1]
    try:
        load_segment(layout, euid, plane, highest)
    except SegmentReadError as error:
        raise SegmentProblem(layout.segment_path(euid, plane, highest), error) from error
    return highest
