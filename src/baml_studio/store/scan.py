"""Whole-store verification: decode every segment and CAS object, never stopping at a bad one."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from baml_studio.format.errors import BamlStudioError
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    DataSegment,
    EngineStarted,
    MetaSegment,
    RootEnded,
    RootStarted,
)
from baml_studio.store.errors import StoreIoError
from baml_studio.store.layout import (
    Plane,
    StoreLayout,
    parse_cas_file_name,
    parse_stream_dir_name,
)
from baml_studio.store.segments import (
    decode_cas_file,
    load_segment,
    plane_sequences,
    read_store_file,
)


@dataclass(frozen=True, slots=True)
class StoreCorruption:
    """A file (or directory) that could not be read or decoded, with its typed error."""

    path: Path
    error: BamlStudioError


@dataclass(frozen=True, slots=True)
class StreamReport:
    euid: bytes
    alive: bool
    meta_high_water: int
    data_high_water: int
    meta_gaps: tuple[tuple[int, int], ...]
    """Inclusive ranges of missing sequences between 1 and the meta high water."""
    data_gaps: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ExecutionReport:
    """What the meta plane says about one execution, and which data segments hold its groups."""

    root: ThreadRef
    started: RootStarted | None
    ended: RootEnded | None
    engine: EngineStarted | None
    data_sequences: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CasCheck:
    objects: int
    """Well-formed CAS objects whose checksum and CID verify."""
    corruptions: tuple[StoreCorruption, ...]


@dataclass(frozen=True, slots=True)
class StoreScan:
    streams: tuple[StreamReport, ...]
    executions: tuple[ExecutionReport, ...]
    """Sorted by root."""
    corruptions: tuple[StoreCorruption, ...]
    cas_objects: int

    @property
    def corrupt_paths(self) -> frozenset[Path]:
        return frozenset(c.path for c in self.corruptions)


@dataclass(slots=True)
class _Execution:
    started: RootStarted | None = None
    ended: RootEnded | None = None
    data_sequences: list[int] = field(default_factory=list)


def sequence_gaps(sequences: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Inclusive missing ranges in ``1..max(sequences)``."""
    gaps: list[tuple[int, int]] = []
    expected = 1
    for seq in sorted(set(sequences)):
        if seq > expected:
            gaps.append((expected, seq - 1))
        expected = seq + 1
    return tuple(gaps)


def scan_store(layout: StoreLayout, is_alive: Callable[[bytes], bool]) -> StoreScan:
    """Decode every stream file and CAS object under ``layout``; corruptions are collected."""
    corruptions: list[StoreCorruption] = []
    executions: dict[ThreadRef, _Execution] = {}
    engines: dict[tuple[bytes, int], EngineStarted] = {}
    streams = [
        _scan_stream(
            layout, euid, _alive(is_alive, euid, corruptions), corruptions, executions, engines
        )
        for euid in _stream_euids(layout, corruptions)
    ]
    cas = check_cas(layout)
    reports = tuple(
        ExecutionReport(
            root,
            ex.started,
            ex.ended,
            engines.get((root.euid, root.engine)),
            tuple(sorted(ex.data_sequences)),
        )
        for root, ex in sorted(executions.items())
    )
    return StoreScan(tuple(streams), reports, tuple(corruptions) + cas.corruptions, cas.objects)


def check_cas(layout: StoreLayout) -> CasCheck:
    """Verify every ``cas/sha256/<2hex>/<64hex>.bamlvalue``: checksum, recomputed CID, path."""
    corruptions: list[StoreCorruption] = []
    objects = 0
    for prefix in _listdir(layout.cas_dir, corruptions):
        directory = layout.cas_dir / prefix
        if len(prefix) != 2 or not directory.is_dir():
            continue
        for name in _listdir(directory, corruptions):
            cid = parse_cas_file_name(name)
            if cid is None or cid.hex()[:2] != prefix:
                continue
            try:
                decode_cas_file(read_store_file(directory / name), cid)
            except BamlStudioError as error:
                corruptions.append(StoreCorruption(directory / name, error))
            else:
                objects += 1
    return CasCheck(objects, tuple(corruptions))


def _stream_euids(layout: StoreLayout, corruptions: list[StoreCorruption]) -> list[bytes]:
    names = _listdir(layout.streams_dir, corruptions)
    euids = (parse_stream_dir_name(n) for n in names if (layout.streams_dir / n).is_dir())
    return sorted(euid for euid in euids if euid is not None)


def _scan_stream(
    layout: StoreLayout,
    euid: bytes,
    alive: bool,
    corruptions: list[StoreCorruption],
    executions: dict[ThreadRef, _Execution],
    engines: dict[tuple[bytes, int], EngineStarted],
) -> StreamReport:
    marks: dict[Plane, tuple[int, ...]] = {}
    for plane in Plane:
        try:
            sequences = plane_sequences(layout, euid, plane)
        except OSError as exc:
            path = layout.plane_dir(euid, plane)
            corruptions.append(StoreCorruption(path, StoreIoError(path, exc)))
            sequences = []
        marks[plane] = tuple(sequences)
        for seq in sequences:
            try:
                segment = load_segment(layout, euid, plane, seq)
            except BamlStudioError as error:
                path = layout.segment_path(euid, plane, seq)
                corruptions.append(StoreCorruption(path, error))
                continue
            _index(segment, executions, engines)
    return StreamReport(
        euid,
        alive,
        max(marks[Plane.META], default=0),
        max(marks[Plane.DATA], default=0),
        sequence_gaps(marks[Plane.META]),
        sequence_gaps(marks[Plane.DATA]),
    )


def _index(
    segment: MetaSegment | DataSegment,
    executions: dict[ThreadRef, _Execution],
    engines: dict[tuple[bytes, int], EngineStarted],
) -> None:
    if isinstance(segment, DataSegment):
        for group in segment.groups:
            executions.setdefault(group.root, _Execution()).data_sequences.append(segment.sequence)
        return
    for record in segment.records:
        if isinstance(record, EngineStarted):
            engines.setdefault((segment.process_euid, record.engine_id), record)
        elif isinstance(record, RootStarted):
            execution = executions.setdefault(record.root, _Execution())
            execution.started = execution.started or record
        elif isinstance(record, RootEnded):
            execution = executions.setdefault(record.root, _Execution())
            execution.ended = execution.ended or record


def _alive(
    is_alive: Callable[[bytes], bool], euid: bytes, corruptions: list[StoreCorruption]
) -> bool:
    try:
        return is_alive(euid)
    except StoreIoError as error:
        corruptions.append(StoreCorruption(error.path, error))
        return False


def _listdir(path: Path, corruptions: list[StoreCorruption]) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    except OSError as exc:
        corruptions.append(StoreCorruption(path, StoreIoError(path, exc)))
        return []
