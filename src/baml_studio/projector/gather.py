"""Gather the fold's inputs for every execution a notified meta object ends.

:func:`gather_root_ended` mirrors the local loader (:mod:`baml_studio.catalog.load`) over the
bucket, by key, so that :func:`baml_studio.catalog.fold.fold_execution` gives the same rows
the local ``baml-studio query`` gives for the same ended execution of a closed store:

* the notified meta object is read; missing or corrupt, the error propagates (the worker
  skips a vanished object and quarantines a corrupt one);
* meta sequence 1 gives ``StreamStarted``; missing or corrupt, it is a meta gap and
  ``stream_started`` is None, as locally;
* ``RootStarted`` and ``EngineStarted`` are found in the notified object or by walking back
  ``meta_seq - 1, meta_seq - 2, …`` (at most ``walk_bound`` objects counting the notified
  one). A missing or corrupt object on the way is a meta gap and the walk goes on.
  ``EngineStarted`` records of meta 1 count as found (it was read anyway); a RootEnded whose
  ``root_started_lost`` flag is set needs no RootStarted (the profiler never wrote it, so the
  walk does not look for it). A walk that ends at its bound with a record still missing
  records the first unread sequence as a gap, and the execution gets no ``RootStarted``
  (the fold then says ``index_corrupt``, or ``root_started_lost`` when RootEnded itself says
  RootStarted was lost);
* each data segment in the executions' ranges is read once, decoding only their groups
  (``MissingDataSegment``/``CorruptDataSegment``/``GroupCountMismatch`` exactly as
  :func:`~baml_studio.catalog.load.load_data`);
* each engine's function table is read by CID; missing or corrupt it is None (NULL labels).

Transient bucket failures (``EvidenceUnavailable``) always propagate: the message is retried.

The ``ProcessInfo`` choice. For an execution with ``RootEnded`` the fold reads only these
``ProcessInfo`` fields: ``euid`` (``process_id``), ``stream_started`` (wall-clock columns) and
``meta_gaps`` (``index_state``: a gap strictly between RootStarted's and RootEnded's meta
sequences). ``alive`` matters only without RootEnded (``running``/``abandoned``), and
``meta_hw``/``data_hw`` only without RootEnded (the data range then runs to ``data_hw``) and in
``processes_v1``, which is not projected. So: ``alive=False`` (the projector never sees a live
stream), ``meta_hw=meta_seq`` (the highest meta sequence it knows of), ``data_hw`` = the
notified segment's ``data_high_water`` (or the highest ``data_last_seq`` if larger), and
``meta_gaps`` = the gaps the walk saw. The walk reads every sequence between an execution's
RootStarted and its RootEnded, so it sees every gap that can change ``index_state``; the rows
equal the local ones whenever the walk finds RootStarted within its bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    DataRead,
    ExecutionInputs,
    ExecutionMeta,
    MissingDataSegment,
    ProcessInfo,
    SegmentIssue,
    read_data_ranges,
)
from baml_studio.catalog.fold_store import function_definition_rows
from baml_studio.format.cas import CODEC_VALUE
from baml_studio.format.function_table import FunctionTable
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    ROOT_ENDED_FLAG_ROOT_STARTED_LOST,
    DataGroup,
    EngineStarted,
    ErrorCapture,
    MetaSegment,
    RootEnded,
    RootStarted,
    StreamStarted,
    ValueAvailable,
    ValueOccurrence,
)
from baml_studio.projector.errors import EvidenceCorrupt, EvidenceMissing
from baml_studio.projector.evidence import EvidenceReader

DEFAULT_WALK_BOUND = 2000
"""Meta objects a walk-back reads at most, counting the notified one (system contract)."""


@dataclass(frozen=True, slots=True)
class Gathered:
    """What one meta object ends, ready to fold."""

    segment: MetaSegment
    """The notified meta object."""
    executions: tuple[ExecutionInputs, ...]
    """One per RootEnded of this stream in ``segment``, in record order."""
    definitions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """``function_definitions_v1`` rows of each execution's engine, by execution id (empty
    when the engine or its table is unknown)."""
    value_cids: dict[str, frozenset[bytes]] = field(default_factory=dict)
    """By execution id: every codec-1 value its facts reference as available (a superset of
    the values its folded rows hold)."""

    def carried_definitions(self) -> dict[str, list[dict[str, Any]]]:
        """Each engine's ``function_definitions_v1`` rows, by the execution id of the first
        of its executions here (record order): the one execution of this meta object that
        carries them. The control plane and the coordinator read the relation as a set per
        ``(program_id, function_id)``, so one copy an engine a meta object is the same
        answer as one copy an execution, for one batch where there were hundreds. The choice
        depends on this meta object only: a redelivery picks the same executions."""
        out: dict[str, list[dict[str, Any]]] = {}
        seen: set[EngineStarted] = set()
        for inputs in self.executions:
            engine = inputs.meta.engine
            if engine is None or engine in seen:
                continue
            seen.add(engine)
            out[inputs.meta.execution_id] = self.definitions.get(inputs.meta.execution_id, [])
        return out


@dataclass(slots=True)
class _Walk:
    """What the walk-back found for the executions of one meta object."""

    started: dict[ThreadRef, tuple[RootStarted, int, int]] = field(default_factory=dict)
    engines: dict[int, EngineStarted] = field(default_factory=dict)
    gaps: set[int] = field(default_factory=set)
    stream_started: StreamStarted | None = None
    exhausted: bool = False


def gather_root_ended(
    reader: EvidenceReader,
    euid_hex: str,
    meta_seq: int,
    *,
    walk_bound: int = DEFAULT_WALK_BOUND,
) -> Gathered:
    """The fold's inputs for every RootEnded of meta object ``meta_seq`` of stream
    ``euid_hex``. Raises ``EvidenceMissing``/``EvidenceCorrupt`` for the notified object
    itself, ``EvidenceUnavailable`` for any transient read failure."""
    if walk_bound < 1:
        raise ValueError(f"walk_bound must be at least 1, got {walk_bound}")
    segment = reader.meta(euid_hex, meta_seq)
    euid = bytes.fromhex(euid_hex)
    ended: dict[ThreadRef, RootEnded] = {}
    for record in segment.records:
        if isinstance(record, RootEnded) and record.root.euid == euid:
            ended.setdefault(record.root, record)
    if not ended:
        return Gathered(segment, ())
    walk = _walk_back(reader, euid_hex, segment, ended, walk_bound)
    metas = [_meta(root, end, meta_seq, walk) for root, end in ended.items()]
    data_hw = max([segment.data_high_water, *(e.data_last_seq for e in ended.values())])
    process = ProcessInfo(
        euid, False, walk.stream_started, meta_seq, data_hw, tuple(sorted(walk.gaps))
    )
    reads = _read_data(reader, euid_hex, metas)
    tables = _function_tables(reader, metas)
    executions: list[ExecutionInputs] = []
    definitions: dict[str, list[dict[str, Any]]] = {}
    made: dict[EngineStarted, list[dict[str, Any]]] = {}
    value_cids: dict[str, frozenset[bytes]] = {}
    for meta in metas:
        engine = meta.engine
        cid = None if engine is None else engine.function_table_cid
        table = None if cid is None else tables.get(cid)
        read = reads[meta.root]
        executions.append(ExecutionInputs(process, meta, table, read))
        definitions[meta.execution_id] = _definitions(engine, table, made)
        value_cids[meta.execution_id] = referenced_values(g for _, g in read.groups)
    return Gathered(segment, tuple(executions), definitions, value_cids)


def _walk_back(
    reader: EvidenceReader,
    euid_hex: str,
    segment: MetaSegment,
    ended: dict[ThreadRef, RootEnded],
    walk_bound: int,
) -> _Walk:
    walk = _Walk()
    meta_seq = segment.sequence
    first = segment if meta_seq == 1 else _optional_meta(reader, euid_hex, 1, walk)
    if first is not None and first.records and isinstance(first.records[0], StreamStarted):
        walk.stream_started = first.records[0]
    if first is not None:
        walk.engines.update(_engines(first))
    wanted_engines = {root.engine for root in ended}
    wanted_started = [
        r for r, e in ended.items() if not e.flags & ROOT_ENDED_FLAG_ROOT_STARTED_LOST
    ]

    def done() -> bool:
        return all(r in walk.started for r in wanted_started) and wanted_engines <= set(
            walk.engines
        )

    lowest = max(1, meta_seq - walk_bound + 1)
    seq = meta_seq
    while seq >= lowest and not done():
        if seq == meta_seq:
            current: MetaSegment | None = segment
        elif seq == 1:
            current = first
        else:
            current = _optional_meta(reader, euid_hex, seq, walk)
        if current is not None:
            _take(current, ended, walk)
        seq -= 1
    if not done() and seq >= 1:
        walk.exhausted = True
        walk.gaps.add(seq)
    return walk


def _optional_meta(
    reader: EvidenceReader, euid_hex: str, seq: int, walk: _Walk
) -> MetaSegment | None:
    """A meta object on the walk; missing or corrupt it is a gap."""
    try:
        return reader.meta(euid_hex, seq)
    except (EvidenceMissing, EvidenceCorrupt):
        walk.gaps.add(seq)
        return None


def _engines(segment: MetaSegment) -> dict[int, EngineStarted]:
    out: dict[int, EngineStarted] = {}
    for record in segment.records:
        if isinstance(record, EngineStarted):
            out.setdefault(record.engine_id, record)
    return out


def _take(segment: MetaSegment, ended: dict[ThreadRef, RootEnded], walk: _Walk) -> None:
    for record in segment.records:
        if isinstance(record, EngineStarted):
            walk.engines.setdefault(record.engine_id, record)
        elif (
            isinstance(record, RootStarted)
            and record.root in ended
            and record.root not in walk.started
        ):
            walk.started[record.root] = (record, segment.sequence, segment.data_high_water)


def _meta(root: ThreadRef, end: RootEnded, meta_seq: int, walk: _Walk) -> ExecutionMeta:
    engine = walk.engines.get(root.engine)
    found = walk.started.get(root)
    if found is None or (walk.exhausted and engine is None):
        return ExecutionMeta(root, None, 0, 0, end, meta_seq, engine)
    started, started_seq, started_hw = found
    return ExecutionMeta(root, started, started_seq, started_hw, end, meta_seq, engine)


def _read_data(
    reader: EvidenceReader, euid_hex: str, metas: Sequence[ExecutionMeta], data_hw: int = 0
) -> dict[ThreadRef, DataRead]:
    """Each data segment in the ranges once, only these executions' groups (``load_data``);
    ``data_hw`` ends the range of an execution without RootEnded."""

    def read(seq: int, roots: list[ThreadRef]) -> tuple[DataGroup, ...] | SegmentIssue:
        try:
            return reader.data(euid_hex, seq, roots=roots).groups
        except EvidenceMissing:
            return MissingDataSegment(seq)
        except EvidenceCorrupt:
            return CorruptDataSegment(seq)

    return read_data_ranges(metas, data_hw, read)


def _definitions(
    engine: EngineStarted | None,
    table: FunctionTable | None,
    made: dict[EngineStarted, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """``function_definitions_v1`` rows of one engine (none if it or its table is unknown),
    made once per engine of a gather (``made``): its executions share one read-only list."""
    if engine is None or table is None:
        return []
    rows = made.get(engine)
    if rows is None:
        found = table
        rows = made[engine] = function_definition_rows([engine], lambda _cid: found)
    return rows


def _function_tables(
    reader: EvidenceReader, metas: Iterable[ExecutionMeta]
) -> dict[bytes, FunctionTable | None]:
    tables: dict[bytes, FunctionTable | None] = {}
    for meta in metas:
        cid = None if meta.engine is None else meta.engine.function_table_cid
        if cid is None or cid in tables:
            continue
        try:
            tables[cid] = reader.function_table(cid)
        except (EvidenceMissing, EvidenceCorrupt):
            tables[cid] = None
    return tables


def referenced_values(groups: Iterable[DataGroup]) -> frozenset[bytes]:
    """CIDs of the codec-1 values the groups' facts hold as available (value occurrences and
    error captures)."""
    cids: set[bytes] = set()
    for group in groups:
        for fact in group.evidence:
            if isinstance(fact, ValueOccurrence | ErrorCapture):
                value = fact.value
                if isinstance(value, ValueAvailable) and value.codec == CODEC_VALUE:
                    cids.add(value.cid)
    return frozenset(cids)


def gather_abandoned(
    reader: EvidenceReader,
    segment: MetaSegment,
    process: ProcessInfo,
    metas: Sequence[ExecutionMeta],
) -> Gathered:
    """The fold's inputs for executions of one stream that have ``RootStarted`` and no
    ``RootEnded`` (the sweep, :mod:`.sweep`, which reads the meta plane and builds ``process``
    and ``metas``; ``segment`` is the stream's newest readable meta object).

    As the local loader does for a dead process: each execution's data range runs from one
    past the data high water of its RootStarted's meta object to ``process.data_hw`` (the
    stream's highest data sequence in the bucket); each data segment in the ranges is read
    once, decoding only these executions' groups (a missing or corrupt one is a
    ``MissingDataSegment``/``CorruptDataSegment`` of every execution whose range covers it;
    without RootEnded there is no group count to check). Function tables, definitions and
    referenced values as :func:`gather_root_ended`. ``ValueError`` for a meta with RootEnded
    or of another stream; ``EvidenceUnavailable`` propagates."""
    for meta in metas:
        if meta.ended is not None or meta.root.euid != process.euid:
            raise ValueError(f"execution {meta.execution_id} is not an open one of this stream")
    reads = _read_data(reader, process.euid.hex(), metas, process.data_hw)
    tables = _function_tables(reader, metas)
    executions: list[ExecutionInputs] = []
    definitions: dict[str, list[dict[str, Any]]] = {}
    made: dict[EngineStarted, list[dict[str, Any]]] = {}
    value_cids: dict[str, frozenset[bytes]] = {}
    for meta in metas:
        read = reads[meta.root]
        found = read.groups
        cid = None if meta.engine is None else meta.engine.function_table_cid
        table = None if cid is None else tables.get(cid)
        executions.append(ExecutionInputs(process, meta, table, read))
        definitions[meta.execution_id] = _definitions(meta.engine, table, made)
        value_cids[meta.execution_id] = referenced_values(g for _, g in found)
    return Gathered(segment, tuple(executions), definitions, value_cids)
