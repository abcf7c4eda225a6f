"""The record model of the profiles-v1 store (reference facts §2–§3), as frozen dataclasses.

These are the values the codecs in :mod:`baml_studio.format` encode and decode. Wire enums are
``IntEnum``s whose values are the frozen wire tags. Bit sets (selection reasons, roles, CCT health,
RootEnded flags) are plain ``int`` masks with named constants.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

from baml_studio.format.ids import CallRef, ThreadRef

SCHEMA_VERSION = 2
META_MAGIC = b"BAMLMET1"
DATA_MAGIC = b"BAMLDAT1"
MAX_STRING_BYTES = 64 * 1024
MAX_THREAD_NAME_LEN = 256


# --- enums ---------------------------------------------------------------------------------------


class RootStatus(enum.IntEnum):
    SUCCEEDED = 0
    FAILED = 1
    CANCELLED = 2
    PANICKED = 3
    ABANDONED = 4


class EdgeKind(enum.IntEnum):
    ROOT = 0
    CALL = 1
    SPAWN = 2


class OverflowReason(enum.IntEnum):
    CONTEXT_MEMORY_UNAVAILABLE_AFTER_DRAIN = 0  # SQL: call_path_memory_unavailable
    INVALID_PARENT_CONTEXT = 1  # SQL: invalid_parent_call_path


class FunctionEndStatus(enum.IntEnum):
    OK = 0
    ERRORED = 1
    CANCELLED = 2
    EXITED = 3


class ValueRole(enum.IntEnum):
    INPUT = 0
    OUTPUT = 1


class ValueLossReason(enum.IntEnum):
    VALUE_MEMORY_EXCEEDED = 0
    VALUE_ATTEMPT_TRANSPORT_EXCEEDED = 1
    ERROR_CAPTURE_ATTEMPT_TRANSPORT_EXCEEDED = 2
    VALUE_TOO_LARGE = 3
    COPY_FAILED = 4
    ENCODE_FAILED = 5
    CAS_WRITE_FAILED = 6
    CAS_CONFLICT = 7
    DISK_GUARD_EXCEEDED = 8
    EVIDENCE_SEGMENT_PUBLISH_FAILED = 9
    STORE_UNAVAILABLE = 10


class ErrorCaptureLossReason(enum.IntEnum):
    ERROR_CAPTURE_ATTEMPT_TRANSPORT_EXCEEDED = 0
    MISSING_STRUCTURAL_JOIN = 1
    START_UNCOMMITTED = 2
    EVIDENCE_QUEUE_FULL = 3
    EVIDENCE_SEGMENT_PUBLISH_FAILED = 4
    DISK_GUARD_EXCEEDED = 5
    STORE_UNAVAILABLE = 6


class ErrorKind(enum.IntEnum):
    FRESH = 0
    RETHROW = 1


class ErrorSource(enum.IntEnum):
    BYTECODE = 0
    NATIVE_CALL = 1
    ENGINE_CALL = 2
    FUTURE_RESUME = 3


class ThreadKind(enum.IntEnum):
    ROOT = 0
    SPAWN = 1


class ThreadEndStatus(enum.IntEnum):
    COMPLETED = 0
    CANCELLED = 1
    ERRORED = 2


# bit sets
SELECT_ROOT = 1 << 0
SELECT_LLM = 1 << 1
SELECT_MANUAL = 1 << 2
ROLE_INPUT = 1 << 0
ROLE_OUTPUT = 1 << 1
ROLE_ERROR = 1 << 2
CCT_COUNTER_SATURATED = 1 << 0
CCT_AWAIT_COUNTER_SATURATED = 1 << 1
CCT_SELF_TIME_UNDERFLOW = 1 << 2
ROOT_ENDED_FLAG_ROOT_STARTED_LOST = 1


# --- shared small values -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallSiteSpan:
    """``file_id, start_offset, end_offset, line`` (4 × u32), in this order on the wire."""

    file_id: int
    start_offset: int
    end_offset: int
    line: int


@dataclass(frozen=True, slots=True)
class ThrowSite:
    """A throw site; inside BAMLERR1 the wire order is ``file_id, line, start, end`` offsets."""

    file_id: int
    line: int
    start_offset: int
    end_offset: int


# --- meta plane ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecutionHealth:
    """The 26 per-execution health counters of RootEnded, in wire order (26 × u64 = 208 bytes)."""

    corrupt_records: int = 0
    active_thread_capacity_exceeded: int = 0
    active_call_capacity_exceeded: int = 0
    join_capacity_exceeded: int = 0
    unmatched_call_facts: int = 0
    unmatched_thread_facts: int = 0
    clock_invalid: int = 0
    cct_segment_publish_failed: int = 0
    evidence_queue_full: int = 0
    evidence_segment_publish_failed: int = 0
    structural_transport_exceeded: int = 0
    value_attempt_transport_exceeded: int = 0
    applicable_error_unwinds: int = 0
    error_captures_queued: int = 0
    error_captures_committed: int = 0
    error_capture_attempt_transport_exceeded: int = 0
    error_capture_missing_structural_join: int = 0
    error_capture_start_uncommitted: int = 0
    error_capture_evidence_queue_full: int = 0
    error_capture_evidence_publish_failed: int = 0
    terminal_error_links_observed: int = 0
    terminal_error_links_queued: int = 0
    terminal_error_links_committed: int = 0
    terminal_error_link_transport_exceeded: int = 0
    terminal_error_link_start_uncommitted: int = 0
    terminal_error_link_evidence_publish_failed: int = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in HEALTH_FIELDS)


HEALTH_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ExecutionHealth))
HEALTH_BYTES = 8 * len(HEALTH_FIELDS)


@dataclass(frozen=True, slots=True)
class StreamStarted:
    pid: int
    zero_unix_ns: int
    baml_version: str
    os_arch: str


@dataclass(frozen=True, slots=True)
class EngineStarted:
    engine_id: int
    program_id: bytes
    function_table_cid: bytes | None = None
    revision_label: str | None = None
    source_label: str | None = None


@dataclass(frozen=True, slots=True)
class RootStarted:
    root: ThreadRef
    started_ns: int
    runtime_id: bytes


@dataclass(frozen=True, slots=True)
class RootEnded:
    root: ThreadRef
    ended_ns: int
    status: RootStatus
    flags: int
    data_first_seq: int
    data_last_seq: int
    data_segment_count: int
    health: ExecutionHealth


MetaRecord = StreamStarted | EngineStarted | RootStarted | RootEnded


@dataclass(frozen=True, slots=True)
class MetaSegment:
    sequence: int
    process_euid: bytes
    data_high_water: int
    records: tuple[MetaRecord, ...]


# --- data plane: CCT -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CctTuple:
    """The identity of a calling context; ``ContextKey`` is its SHA-256 (§3.2)."""

    program_id: bytes
    parent_key: bytes | None
    function_id: int
    call_site: CallSiteSpan | None
    edge_kind: EdgeKind


@dataclass(frozen=True, slots=True)
class CctCounters:
    """104 bytes: six u64 counts, three u128 durations, one u64 await count."""

    invocations_started: int = 0
    spans_selected: int = 0
    completed_ok: int = 0
    completed_error: int = 0
    completed_cancelled: int = 0
    completed_exit: int = 0
    inclusive_ns: int = 0
    direct_call_child_inclusive_ns: int = 0
    await_ns: int = 0
    await_count: int = 0


@dataclass(frozen=True, slots=True)
class CctContext:
    key: bytes
    tuple: CctTuple | None
    counters: CctCounters


@dataclass(frozen=True, slots=True)
class CctOverflow:
    reason: OverflowReason
    edge_kind: EdgeKind
    counters: CctCounters


@dataclass(frozen=True, slots=True)
class CctSection:
    health: int = 0
    contexts: tuple[CctContext, ...] = ()
    overflows: tuple[CctOverflow, ...] = ()

    def is_empty(self) -> bool:
        return not self.contexts and not self.overflows


# --- data plane: evidence ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NormalContext:
    """``0x00 ‖ ContextKey[32]``."""

    key: bytes


@dataclass(frozen=True, slots=True)
class OverflowContext:
    """``0x01 ‖ reason u8 ‖ edge_kind u8``."""

    reason: OverflowReason
    edge_kind: EdgeKind


ContextRef = NormalContext | OverflowContext


@dataclass(frozen=True, slots=True)
class ValueAvailable:
    """``0x00 ‖ cid[32] ‖ codec u16 ‖ encoded_bytes u64``."""

    cid: bytes
    codec: int
    encoded_bytes: int


@dataclass(frozen=True, slots=True)
class ValueLost:
    """``0x01 ‖ ValueLossReason u8``."""

    reason: ValueLossReason


ValueState = ValueAvailable | ValueLost


@dataclass(frozen=True, slots=True)
class RuntimeAnnotation:
    annotation_ordinal: int
    runtime_id: bytes


@dataclass(frozen=True, slots=True)
class SpanStart:
    call: CallRef
    parent: CallRef | None
    thread: ThreadRef
    context: ContextRef
    function_id: int
    call_site: CallSiteSpan | None
    edge_kind: EdgeKind
    started_ns: int
    selection_reasons: int
    roles: int
    runtime: RuntimeAnnotation | None = None


@dataclass(frozen=True, slots=True)
class SpanEnd:
    call: CallRef
    ended_ns: int
    status: FunctionEndStatus
    inclusive_ns: int


@dataclass(frozen=True, slots=True)
class SpanRuntimeId:
    call: CallRef
    annotation_ordinal: int
    runtime_id: bytes


@dataclass(frozen=True, slots=True)
class ValueOccurrence:
    call: CallRef
    context: ContextRef
    role: ValueRole
    value: ValueState


@dataclass(frozen=True, slots=True, order=True)
class ErrorCaptureId:
    thread: ThreadRef
    unwind_ordinal: int


@dataclass(frozen=True, slots=True)
class ErrorCapture:
    """Nested ``BAMLERR1`` record, version 1."""

    capture_id: ErrorCaptureId
    throw_call: CallRef
    context: ContextRef
    throw_function_id: int
    throw_site: ThrowSite | None
    kind: ErrorKind
    source: ErrorSource
    value: ValueState


@dataclass(frozen=True, slots=True)
class TerminalErrorRef:
    """Nested ``BAMLTER1`` record, version 1: a call's terminal error, or why it was lost."""

    call: CallRef
    target: ErrorCaptureId | ErrorCaptureLossReason


@dataclass(frozen=True, slots=True)
class ThreadStart:
    thread: ThreadRef
    parent: ThreadRef | None
    spawn_call: CallRef | None
    spawn_site: CallSiteSpan | None
    started_ns: int
    kind: ThreadKind
    name: str


@dataclass(frozen=True, slots=True)
class ThreadEnd:
    thread: ThreadRef
    ended_ns: int
    status: ThreadEndStatus


Fact = (
    SpanStart
    | SpanEnd
    | SpanRuntimeId
    | ValueOccurrence
    | ErrorCapture
    | TerminalErrorRef
    | ThreadStart
    | ThreadEnd
)


@dataclass(frozen=True, slots=True)
class DataGroup:
    """All of one execution's CCT deltas and evidence facts in one data segment."""

    root: ThreadRef
    cct: CctSection
    evidence: tuple[Fact, ...]


@dataclass(frozen=True, slots=True)
class DataSegment:
    sequence: int
    process_euid: bytes
    groups: tuple[DataGroup, ...]
