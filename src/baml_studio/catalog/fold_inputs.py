"""What the fold needs to know about one execution, gathered by :mod:`.load` (no I/O here).

The loader reads the meta plane of every stream into a :class:`ProcessInfo` per stream and an
:class:`ExecutionMeta` per listed execution (RootStarted or RootEnded seen), then the data
groups of the executions it folds into a :class:`DataRead`. :func:`baml_studio.catalog.fold.
fold_execution` turns an :class:`ExecutionInputs` into catalog rows without touching a file.

Data issues (reference facts §5.3) render as the Rust ``Debug`` strings the ``health_v1``
``data_issue`` rows carry, e.g. ``MissingDataSegment(3)`` or
``GroupCountMismatch { expected: 2, found: 1 }``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from baml_studio.format.function_table import FunctionTable
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    DataGroup,
    EngineStarted,
    RootEnded,
    RootStarted,
    StreamStarted,
)


@dataclass(frozen=True, slots=True)
class MissingDataSegment:
    sequence: int

    def debug(self) -> str:
        return f"MissingDataSegment({self.sequence})"


@dataclass(frozen=True, slots=True)
class CorruptDataSegment:
    sequence: int

    def debug(self) -> str:
        return f"CorruptDataSegment({self.sequence})"


@dataclass(frozen=True, slots=True)
class GroupCountMismatch:
    expected: int
    found: int

    def debug(self) -> str:
        return f"GroupCountMismatch {{ expected: {self.expected}, found: {self.found} }}"


@dataclass(frozen=True, slots=True)
class NoRootEnded:
    def debug(self) -> str:
        return "NoRootEnded"


@dataclass(frozen=True, slots=True)
class UnresolvedDependency:
    def debug(self) -> str:
        return "UnresolvedDependency"


DataIssue = (
    MissingDataSegment
    | CorruptDataSegment
    | GroupCountMismatch
    | NoRootEnded
    | UnresolvedDependency
)
SegmentIssue = MissingDataSegment | CorruptDataSegment
"""Why a data segment in range could not be read."""


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process stream as of the snapshot (meta plane and directory listings only)."""

    euid: bytes
    alive: bool
    stream_started: StreamStarted | None
    """Record 0 of meta sequence 1; None if that segment is missing or corrupt."""
    meta_hw: int
    data_hw: int
    meta_gaps: tuple[int, ...] = ()
    """Meta sequences in ``1..=meta_hw`` that are missing or do not decode, ascending."""

    @property
    def process_id(self) -> str:
        return self.euid.hex()


@dataclass(frozen=True, slots=True)
class ExecutionMeta:
    """What the meta plane says about one execution."""

    root: ThreadRef
    started: RootStarted | None = None
    started_seq: int = 0
    """Meta sequence holding RootStarted (0 if absent)."""
    started_data_hw: int = 0
    """``data_high_water`` of the meta segment holding RootStarted."""
    ended: RootEnded | None = None
    ended_seq: int = 0
    """Meta sequence holding RootEnded (0 if absent)."""
    engine: EngineStarted | None = None

    @property
    def execution_id(self) -> str:
        return self.root.wire()

    def data_range(self, process_data_hw: int) -> tuple[int, int]:
        """The data sequences to fold, inclusive; ``(0, 0)`` or ``lo > hi`` means none.

        With RootEnded: ``data_first_seq ..= data_last_seq``. Without: from one past the data
        high water of RootStarted's meta segment (1 if RootStarted is absent too) to the
        process's data high water.
        """
        if self.ended is not None:
            return self.ended.data_first_seq, self.ended.data_last_seq
        return self.started_data_hw + 1, process_data_hw


@dataclass(frozen=True, slots=True)
class DataRead:
    """The data groups of one execution, read from its data range, with what went wrong."""

    groups: tuple[tuple[int, DataGroup], ...] = ()
    """``(data sequence, group)`` in ascending sequence order."""
    issues: tuple[DataIssue, ...] = ()
    """Missing/corrupt segments in range order, then the group-count mismatch if any."""
    files_found: int = 0
    """Data files in range that hold a group of this execution."""


def read_data_ranges(
    metas: Sequence[ExecutionMeta],
    data_hw: int,
    read: Callable[[int, list[ThreadRef]], Iterable[DataGroup] | SegmentIssue],
) -> dict[ThreadRef, DataRead]:
    """The data groups of ``metas`` (executions of one process), calling ``read(seq, roots)``
    once for each data segment in their ranges (``data_hw`` ends the range of an execution
    without RootEnded): the segment's groups of those roots, or the issue that kept it from
    being read, which every execution whose range holds it gets. The local catalog
    (:func:`baml_studio.catalog.load.load_data`) and the projector (``gather``) read through
    this, each with its own reader."""
    wanted: dict[int, list[ThreadRef]] = {}
    for meta in metas:
        lo, hi = meta.data_range(data_hw)
        for seq in range(max(lo, 1), hi + 1):
            wanted.setdefault(seq, []).append(meta.root)
    groups: dict[ThreadRef, list[tuple[int, DataGroup]]] = {m.root: [] for m in metas}
    issues: dict[ThreadRef, list[DataIssue]] = {m.root: [] for m in metas}
    for seq in sorted(wanted):
        roots = wanted[seq]
        found = read(seq, roots)
        if isinstance(found, MissingDataSegment | CorruptDataSegment):
            for root in roots:
                issues[root].append(found)
        else:
            for group in found:
                groups[group.root].append((seq, group))
    out: dict[ThreadRef, DataRead] = {}
    for meta in metas:
        count = len(groups[meta.root])
        ended = meta.ended
        if ended is not None and count != ended.data_segment_count:
            issues[meta.root].append(GroupCountMismatch(ended.data_segment_count, count))
        out[meta.root] = DataRead(tuple(groups[meta.root]), tuple(issues[meta.root]), count)
    return out


@dataclass(frozen=True, slots=True)
class ExecutionInputs:
    """Everything :func:`~baml_studio.catalog.fold.fold_execution` folds."""

    process: ProcessInfo
    meta: ExecutionMeta
    function_table: FunctionTable | None
    """The engine's FunctionTableV1; None (NULL labels) if absent, missing or corrupt."""
    data: DataRead
