"""Loading a store for the fold: the I/O side of the catalog.

Three costs, kept apart:

* :func:`list_marks` lists each stream's plane directories and probes its lock: it opens no
  segment. This fixes a snapshot (every later read stays at or below these high waters).
* :func:`load_index` decodes every meta segment (the *index*): processes, engines, and the
  RootStarted/RootEnded of each listed execution. It opens no data file.
* :func:`load_data` reads the data segments of some executions of one process: each needed
  segment once, decoding only those executions' groups (``roots=``).

A segment that is missing or does not decode is reported, never raised: a bad meta file is a
meta gap, a bad data file a ``MissingDataSegment``/``CorruptDataSegment`` of the executions
whose range covers it. An OS error reading a data file also counts as corrupt.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    DataRead,
    ExecutionMeta,
    MissingDataSegment,
    ProcessInfo,
    SegmentIssue,
    read_data_ranges,
)
from baml_studio.format.cas import CODEC_FUNCTION_TABLE, cas_relpath
from baml_studio.format.errors import BamlStudioError
from baml_studio.format.function_table import FunctionTable, decode_function_table
from baml_studio.format.ids import ThreadRef, value_cid_wire
from baml_studio.format.records import (
    DataGroup,
    EngineStarted,
    RootEnded,
    RootStarted,
    StreamStarted,
)
from baml_studio.store import Plane, StoreLayout, StoreNotFound, StoreReader
from baml_studio.store.layout import parse_cas_file_name


@dataclass(frozen=True, slots=True)
class StreamMarks:
    """One stream as listed for a snapshot: its well-formed segment names and liveness."""

    euid: bytes
    alive: bool
    meta_sequences: tuple[int, ...]
    data_sequences: tuple[int, ...]

    @property
    def meta_hw(self) -> int:
        return self.meta_sequences[-1] if self.meta_sequences else 0

    @property
    def data_hw(self) -> int:
        return self.data_sequences[-1] if self.data_sequences else 0


@dataclass(frozen=True, slots=True)
class MetaProblem:
    """A meta segment that could not be read (it counts as a gap)."""

    euid: bytes
    sequence: int
    error: BamlStudioError


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """The meta plane of every stream, as of a snapshot."""

    processes: dict[bytes, ProcessInfo]
    executions: tuple[ExecutionMeta, ...]
    """Every listed execution (RootStarted or RootEnded seen), sorted by execution id."""
    engines: tuple[EngineStarted, ...]
    """Every EngineStarted, by (process, engine id)."""
    problems: tuple[MetaProblem, ...]


def list_marks(reader: StoreReader) -> tuple[StreamMarks, ...]:
    """Every stream's segment listings and liveness, sorted by euid. Opens no segment."""
    return tuple(
        StreamMarks(
            euid,
            reader.is_alive(euid),
            tuple(reader.meta_sequences(euid)),
            tuple(reader.data_sequences(euid)),
        )
        for euid in reader.list_streams()
    )


def load_index(reader: StoreReader, marks: Iterable[StreamMarks]) -> StoreIndex:
    """Decode every listed meta segment (within the marks); no data file is opened."""
    processes: dict[bytes, ProcessInfo] = {}
    started: dict[ThreadRef, tuple[RootStarted, int, int]] = {}
    ended: dict[ThreadRef, tuple[RootEnded, int]] = {}
    engines: dict[tuple[bytes, int], EngineStarted] = {}
    problems: list[MetaProblem] = []
    for mark in marks:
        present = set(mark.meta_sequences)
        gaps = [seq for seq in range(1, mark.meta_hw + 1) if seq not in present]
        stream_started: StreamStarted | None = None
        for seq in mark.meta_sequences:
            try:
                segment = reader.read_meta(mark.euid, seq)
            except BamlStudioError as error:
                problems.append(MetaProblem(mark.euid, seq, error))
                gaps.append(seq)
                continue
            for record in segment.records:
                if isinstance(record, StreamStarted):
                    stream_started = record
                elif isinstance(record, EngineStarted):
                    engines.setdefault((mark.euid, record.engine_id), record)
                elif isinstance(record, RootStarted) and record.root.euid == mark.euid:
                    started.setdefault(record.root, (record, seq, segment.data_high_water))
                elif isinstance(record, RootEnded) and record.root.euid == mark.euid:
                    ended.setdefault(record.root, (record, seq))
        processes[mark.euid] = ProcessInfo(
            mark.euid, mark.alive, stream_started, mark.meta_hw, mark.data_hw, tuple(sorted(gaps))
        )
    metas = [
        _execution(root, started.get(root), ended.get(root), engines)
        for root in started.keys() | ended.keys()
    ]
    metas.sort(key=lambda m: m.execution_id)
    return StoreIndex(
        processes, tuple(metas), tuple(engines[k] for k in sorted(engines)), tuple(problems)
    )


def _execution(
    root: ThreadRef,
    started: tuple[RootStarted, int, int] | None,
    ended: tuple[RootEnded, int] | None,
    engines: dict[tuple[bytes, int], EngineStarted],
) -> ExecutionMeta:
    """One listed execution; the first RootStarted and RootEnded (lowest meta sequence) win."""
    s_record, s_seq, s_hw = started if started is not None else (None, 0, 0)
    e_record, e_seq = ended if ended is not None else (None, 0)
    engine = engines.get((root.euid, root.engine))
    return ExecutionMeta(root, s_record, s_seq, s_hw, e_record, e_seq, engine)


def load_data(
    reader: StoreReader, mark: StreamMarks, metas: Sequence[ExecutionMeta]
) -> dict[ThreadRef, DataRead]:
    """The data groups of ``metas`` (executions of ``mark``'s process), reading each data
    segment in their ranges once and decoding only their groups."""
    listed = set(mark.data_sequences)

    def read(seq: int, roots: list[ThreadRef]) -> tuple[DataGroup, ...] | SegmentIssue:
        if seq not in listed:
            return MissingDataSegment(seq)
        try:
            return reader.read_data(mark.euid, seq, roots=roots).groups
        except StoreNotFound:
            return MissingDataSegment(seq)
        except BamlStudioError:
            return CorruptDataSegment(seq)

    return read_data_ranges(metas, mark.data_hw, read)


class FunctionTables:
    """Function tables by CID, read from the CAS once; a missing, corrupt or non-codec-2
    object reads as None (NULL labels). Thread-safe."""

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader
        self._tables: dict[bytes, FunctionTable | None] = {}
        self._lock = threading.Lock()

    def get(self, cid: bytes | None) -> FunctionTable | None:
        if cid is None:
            return None
        with self._lock:
            if cid in self._tables:
                return self._tables[cid]
        table: FunctionTable | None = None
        try:
            obj = self._reader.read_cas(cid)
            if obj.codec == CODEC_FUNCTION_TABLE:
                table = decode_function_table(obj.body)
        except BamlStudioError:
            table = None
        with self._lock:
            self._tables[cid] = table
        return table


def store_file_rows(reader: StoreReader, marks: Iterable[StreamMarks]) -> list[dict[str, Any]]:
    """``store_files_v1`` rows: every listed segment, fully read and decoded (a data file's
    groups too), sorted by (process, plane, sequence). A file gone since the listing is left
    out."""
    layout = StoreLayout(reader.root)
    rows: list[dict[str, Any]] = []
    for mark in marks:
        for plane, sequences in (
            (Plane.DATA, mark.data_sequences),
            (Plane.META, mark.meta_sequences),
        ):
            for seq in sequences:
                path = layout.segment_path(mark.euid, plane, seq)
                try:
                    length = path.stat().st_size
                except OSError:
                    continue
                count: int | None
                try:
                    if plane is Plane.META:
                        count = len(reader.read_meta(mark.euid, seq).records)
                    else:
                        count = len(reader.read_data(mark.euid, seq).groups)
                except BamlStudioError:
                    count = None
                rows.append(
                    {"process_id": mark.euid.hex(), "plane": plane.value, "sequence": seq,
                     "path": path.relative_to(reader.root).as_posix(),
                     "record_or_group_count": count, "payload_len": length,
                     "checksum_ok": count is not None, "decode_ok": count is not None}
                )  # fmt: skip
    return rows


def value_index_rows(reader: StoreReader) -> list[dict[str, Any]]:
    """``value_index_v1`` rows: every CAS object that verifies (checksum, CID, path), sorted
    by CID. Every object is read in full."""
    rows: list[dict[str, Any]] = []
    cas_dir = StoreLayout(reader.root).cas_dir
    try:
        prefixes = sorted(os.listdir(cas_dir))
    except OSError:
        return rows
    for prefix in prefixes:
        try:
            names = sorted(os.listdir(cas_dir / prefix))
        except OSError:
            continue
        for name in names:
            cid = parse_cas_file_name(name)
            if cid is None or cid.hex()[:2] != prefix:
                continue
            try:
                obj = reader.read_cas(cid)
            except BamlStudioError:
                continue
            rows.append(
                {"cid": value_cid_wire(cid), "codec": obj.codec, "body_len": len(obj.body),
                 "path": cas_relpath(cid)}
            )  # fmt: skip
    return rows
