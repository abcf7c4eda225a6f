"""Hand-built fixtures: segments holding every record and fact kind, and raw-byte builders."""

from __future__ import annotations

from baml_studio.format.binio import with_checksum
from baml_studio.format.cct import context_key
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    DATA_MAGIC,
    META_MAGIC,
    CallSiteSpan,
    CctContext,
    CctCounters,
    CctOverflow,
    CctSection,
    CctTuple,
    DataGroup,
    DataSegment,
    EdgeKind,
    EngineStarted,
    ErrorCapture,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    ErrorKind,
    ErrorSource,
    ExecutionHealth,
    Fact,
    FunctionEndStatus,
    MetaSegment,
    NormalContext,
    OverflowContext,
    OverflowReason,
    RootEnded,
    RootStarted,
    RootStatus,
    RuntimeAnnotation,
    SpanEnd,
    SpanRuntimeId,
    SpanStart,
    StreamStarted,
    TerminalErrorRef,
    ThreadEnd,
    ThreadEndStatus,
    ThreadKind,
    ThreadStart,
    ThrowSite,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)

EUID = bytes(range(16))
ROOT = ThreadRef(EUID, 1, 1)
ROOT2 = ThreadRef(EUID, 1, 2)
CALL = CallRef(ROOT, 1)
CHILD = CallRef(ROOT, 2)
SITE = CallSiteSpan(1, 10, 20, 3)
TUPLE = CctTuple(b"\x11" * 16, None, 7, SITE, EdgeKind.ROOT)
KEY = context_key(TUPLE)
CAPTURE_ID = ErrorCaptureId(ROOT, 1)


def rich_meta_segment() -> MetaSegment:
    return MetaSegment(
        sequence=1,
        process_euid=EUID,
        data_high_water=0,
        records=(
            StreamStarted(4242, 1_700_000_000_000_000_000, "0.17.0", "macos-aarch64"),
            EngineStarted(1, b"\x11" * 16, b"\x33" * 32, "rev", None),
            RootStarted(ROOT, 10, b"\x0b" * 16),
            RootEnded(ROOT, 99, RootStatus.FAILED, 1, 1, 2, 2, ExecutionHealth(3, clock_invalid=1)),
        ),
    )


def rich_facts() -> tuple[Fact, ...]:
    return (
        ThreadStart(ROOT, None, None, None, 5, ThreadKind.ROOT, "main"),
        SpanStart(
            CALL,
            None,
            ROOT,
            NormalContext(KEY),
            7,
            SITE,
            EdgeKind.ROOT,
            10,
            1,
            7,
            RuntimeAnnotation(0, b"\x0b" * 16),
        ),
        SpanStart(
            CHILD,
            CALL,
            ROOT,
            OverflowContext(OverflowReason.INVALID_PARENT_CONTEXT, EdgeKind.CALL),
            8,
            None,
            EdgeKind.CALL,
            11,
            0,
            0,
        ),
        SpanRuntimeId(CALL, 1, b"\x0c" * 16),
        ValueOccurrence(
            CALL, NormalContext(KEY), ValueRole.INPUT, ValueAvailable(b"\x44" * 32, 1, 9)
        ),
        ValueOccurrence(
            CALL, NormalContext(KEY), ValueRole.OUTPUT, ValueLost(ValueLossReason.VALUE_TOO_LARGE)
        ),
        ErrorCapture(
            CAPTURE_ID,
            CHILD,
            NormalContext(KEY),
            8,
            ThrowSite(1, 3, 10, 20),
            ErrorKind.FRESH,
            ErrorSource.BYTECODE,
            ValueAvailable(b"\x55" * 32, 1, 12),
        ),
        TerminalErrorRef(CALL, CAPTURE_ID),
        TerminalErrorRef(CHILD, ErrorCaptureLossReason.START_UNCOMMITTED),
        SpanEnd(CHILD, 20, FunctionEndStatus.ERRORED, 9),
        SpanEnd(CALL, 30, FunctionEndStatus.OK, 20),
        ThreadEnd(ROOT, 31, ThreadEndStatus.COMPLETED),
    )


def rich_cct() -> CctSection:
    return CctSection(
        health=0b010,
        contexts=(
            CctContext(KEY, TUPLE, CctCounters(1, 1, 1, 0, 0, 0, 20, 9, 0, 0)),
            CctContext(b"\x66" * 32, None, CctCounters(completed_error=1, inclusive_ns=9)),
        ),
        overflows=(
            CctOverflow(OverflowReason.INVALID_PARENT_CONTEXT, EdgeKind.CALL, CctCounters(1)),
        ),
    )


def rich_data_segment() -> DataSegment:
    return DataSegment(
        sequence=3,
        process_euid=EUID,
        groups=(
            DataGroup(ROOT, rich_cct(), rich_facts()),
            DataGroup(ROOT2, CctSection(), (ThreadEnd(ROOT2, 1, ThreadEndStatus.CANCELLED),)),
        ),
    )


# --- raw builders for crafted (invalid) inputs --------------------------------------------------


def be(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big")


def record(tag: int, body: bytes, body_len: int | None = None) -> bytes:
    return bytes([tag]) + be(len(body) if body_len is None else body_len, 4) + body


def meta_file(
    payload: bytes,
    count: int,
    *,
    magic: bytes = META_MAGIC,
    version: int = 2,
    sequence: int = 1,
    euid: bytes = EUID,
    payload_len: int | None = None,
    tail: bytes = b"",
) -> bytes:
    size = len(payload) if payload_len is None else payload_len
    header = magic + be(version, 2) + be(sequence, 8) + euid + be(0, 8) + be(count, 8)
    return with_checksum(header + be(size, 8) + payload + tail)


def group_bytes(
    root: ThreadRef,
    *,
    health: int = 0,
    cct: bytes = b"",
    cct_count: int = 0,
    evidence: bytes = b"",
    evidence_count: int = 0,
) -> bytes:
    return (
        root.to_bytes()
        + bytes([health])
        + be(cct_count, 8)
        + be(len(cct), 8)
        + cct
        + be(evidence_count, 8)
        + be(len(evidence), 8)
        + evidence
    )


def data_file(
    payload: bytes,
    count: int,
    *,
    magic: bytes = DATA_MAGIC,
    version: int = 2,
    euid: bytes = EUID,
    tail: bytes = b"",
) -> bytes:
    header = magic + be(version, 2) + be(1, 8) + euid + be(count, 8) + be(len(payload), 8)
    return with_checksum(header + payload + tail)
