"""The evidence section of a data group: exact per-call facts (reference facts §3.3, P0 form).

::

    evidence_payload := u64 fact_count ‖ { u8 tag ‖ u32 body_len ‖ body }*

Tags: 0 SpanStart, 1 SpanEnd, 2 SpanRuntimeId, 3 ValueOccurrence, 4 ErrorCapture (nested
``BAMLERR1`` v1), 5 TerminalErrorRef (nested ``BAMLTER1`` v1), 6 ThreadStart, 7 ThreadEnd.

Errors: a count that cannot fit, or a payload that ends early, is ``Truncated``; an unknown enum
value, option tag or reserved bit is ``InvalidKind``; everything specific to evidence is
``InvalidEvidence(EvidenceIssue.…)`` — ``UNKNOWN_TAG``, ``BODY_LENGTH_MISMATCH`` (a body shorter
or longer than its fields), ``LENGTH_MISMATCH`` (bytes after the last fact),
``RECORD_COUNT_MISMATCH``, ``INVALID_ERROR_CAPTURE``/``INVALID_TERMINAL_REF`` (nested magic or
version), ``THREAD_NAME_TOO_LONG`` and ``DUPLICATE_THREAD_START``/``DUPLICATE_THREAD_END`` (a
second start/end for one thread within one payload).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from baml_studio.format.binio import (
    Buffer,
    Reader,
    Writer,
    enum_at,
    put_call,
    put_site,
    put_thread,
    read_call,
    read_site,
    read_thread,
)
from baml_studio.format.errors import (
    EncodeError,
    EvidenceIssue,
    InvalidEvidence,
    InvalidKind,
    TrailingBytes,
    Truncated,
)
from baml_studio.format.records import (
    MAX_THREAD_NAME_LEN,
    ContextRef,
    EdgeKind,
    ErrorCapture,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    ErrorKind,
    ErrorSource,
    Fact,
    FunctionEndStatus,
    NormalContext,
    OverflowContext,
    OverflowReason,
    RuntimeAnnotation,
    SpanEnd,
    SpanRuntimeId,
    SpanStart,
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
    ValueState,
)

ERROR_CAPTURE_MAGIC = b"BAMLERR1"
TERMINAL_ERROR_MAGIC = b"BAMLTER1"
ERROR_CODEC_VERSION = 1
MIN_FACT_BYTES = 5
BITS_MASK = 0b111  # selection_reasons and roles: bits above 2 are invalid
_EDGES = tuple(EdgeKind)
_OVERFLOW_REASONS = tuple(OverflowReason)
_VALUE_LOSSES = tuple(ValueLossReason)
_END_STATUSES = tuple(FunctionEndStatus)
_ROLES = tuple(ValueRole)
_ERROR_KINDS = tuple(ErrorKind)
_ERROR_SOURCES = tuple(ErrorSource)
_CAPTURE_LOSSES = tuple(ErrorCaptureLossReason)
_THREAD_KINDS = tuple(ThreadKind)
_THREAD_STATUSES = tuple(ThreadEndStatus)


def _bits(value: int, what: str) -> int:
    if value & ~BITS_MASK:
        raise InvalidKind(f"{what} {value:#04x} sets bits above 2")
    return value


# --- shared pieces -----------------------------------------------------------------------------


def put_context_ref(w: Writer, ref: ContextRef) -> None:
    """``0x00 ‖ ContextKey[32]`` or the P0 overflow form ``0x01 ‖ reason u8 ‖ edge_kind u8``."""
    if isinstance(ref, NormalContext):
        w.u8(0)
        w.fixed(ref.key, 32, "ContextKey")
    else:
        w.u8(1)
        w.u8(int(ref.reason))
        w.u8(int(ref.edge_kind))


def read_context_ref(r: Reader) -> ContextRef:
    tag = r.u8()
    if tag == 0:
        return NormalContext(r.raw(32))
    if tag == 1:
        reason = enum_at(_OVERFLOW_REASONS, r.u8(), "overflow reason")
        return OverflowContext(reason, enum_at(_EDGES, r.u8(), "edge_kind"))
    raise InvalidKind(f"ContextRef tag {tag} (valid: 0-1)")


def put_value_state(w: Writer, state: ValueState) -> None:
    """``0x00 ‖ cid[32] ‖ codec u16 ‖ encoded_bytes u64`` or ``0x01 ‖ ValueLossReason u8``."""
    if isinstance(state, ValueAvailable):
        w.u8(0)
        w.fixed(state.cid, 32, "value cid")
        w.u16(state.codec)
        w.u64(state.encoded_bytes)
    else:
        w.u8(1)
        w.u8(int(state.reason))


def read_value_state(r: Reader) -> ValueState:
    tag = r.u8()
    if tag == 0:
        return ValueAvailable(r.raw(32), r.u16(), r.u64())
    if tag == 1:
        return ValueLost(enum_at(_VALUE_LOSSES, r.u8(), "value loss reason"))
    raise InvalidKind(f"ValueState tag {tag} (valid: 0-1)")


# --- per-fact bodies ----------------------------------------------------------------------------


def _put_span_start(w: Writer, f: SpanStart) -> None:
    put_call(w, f.call)
    w.opt(f.parent, lambda p: put_call(w, p))
    put_thread(w, f.thread)
    put_context_ref(w, f.context)
    w.u32(f.function_id)
    w.opt(f.call_site, lambda s: put_site(w, s))
    w.u8(int(f.edge_kind))
    w.u64(f.started_ns)
    w.u8(_encodable_bits(f.selection_reasons, "selection_reasons"))
    w.u8(_encodable_bits(f.roles, "roles"))
    if f.runtime is None:
        w.u8(0)
    else:
        w.u8(1)
        w.u32(f.runtime.annotation_ordinal)
        w.fixed(f.runtime.runtime_id, 16, "runtime_id")


def _read_span_start(r: Reader) -> SpanStart:
    call = read_call(r)
    parent = read_call(r) if r.flag() else None
    thread = read_thread(r)
    context = read_context_ref(r)
    function_id = r.u32()
    site = read_site(r) if r.flag() else None
    edge = enum_at(_EDGES, r.u8(), "edge_kind")
    started_ns = r.u64()
    reasons = _bits(r.u8(), "selection_reasons")
    roles = _bits(r.u8(), "roles")
    runtime = RuntimeAnnotation(r.u32(), r.raw(16)) if r.flag() else None
    return SpanStart(
        call, parent, thread, context, function_id, site, edge, started_ns, reasons, roles, runtime
    )


def _put_span_end(w: Writer, f: SpanEnd) -> None:
    put_call(w, f.call)
    w.u64(f.ended_ns)
    w.u8(int(f.status))
    w.u64(f.inclusive_ns)


def _read_span_end(r: Reader) -> SpanEnd:
    call, ended = read_call(r), r.u64()
    return SpanEnd(call, ended, enum_at(_END_STATUSES, r.u8(), "SpanEnd status"), r.u64())


def _put_runtime_id(w: Writer, f: SpanRuntimeId) -> None:
    put_call(w, f.call)
    w.u32(f.annotation_ordinal)
    w.fixed(f.runtime_id, 16, "runtime_id")


def _read_runtime_id(r: Reader) -> SpanRuntimeId:
    return SpanRuntimeId(read_call(r), r.u32(), r.raw(16))


def _put_occurrence(w: Writer, f: ValueOccurrence) -> None:
    put_call(w, f.call)
    put_context_ref(w, f.context)
    w.u8(int(f.role))
    put_value_state(w, f.value)


def _read_occurrence(r: Reader) -> ValueOccurrence:
    call, context = read_call(r), read_context_ref(r)
    role = enum_at(_ROLES, r.u8(), "value role")
    return ValueOccurrence(call, context, role, read_value_state(r))


def _put_error_id(w: Writer, capture_id: ErrorCaptureId) -> None:
    put_thread(w, capture_id.thread)
    w.u64(capture_id.unwind_ordinal)


def _read_error_id(r: Reader) -> ErrorCaptureId:
    return ErrorCaptureId(read_thread(r), r.u64())


def _nested_header(r: Reader, magic: bytes, issue: EvidenceIssue) -> None:
    if r.raw(8) != magic:
        raise InvalidEvidence(issue, f"nested record does not start with {magic!r}")
    version = r.u16()
    if version != ERROR_CODEC_VERSION:
        raise InvalidEvidence(issue, f"nested {magic!r} version {version} (supported: 1)")


def _put_error_capture(w: Writer, f: ErrorCapture) -> None:
    w.raw(ERROR_CAPTURE_MAGIC)
    w.u16(ERROR_CODEC_VERSION)
    _put_error_id(w, f.capture_id)
    put_call(w, f.throw_call)
    put_context_ref(w, f.context)
    w.u32(f.throw_function_id)
    site = f.throw_site
    if site is None:
        w.u8(0)
    else:  # ThrowSite order differs from call sites: file_id, line, start, end
        w.u8(1)
        for value in (site.file_id, site.line, site.start_offset, site.end_offset):
            w.u32(value)
    w.u8(int(f.kind))
    w.u8(int(f.source))
    put_value_state(w, f.value)


def _read_error_capture(r: Reader) -> ErrorCapture:
    _nested_header(r, ERROR_CAPTURE_MAGIC, EvidenceIssue.INVALID_ERROR_CAPTURE)
    capture_id, throw_call, context = _read_error_id(r), read_call(r), read_context_ref(r)
    function_id = r.u32()
    site = ThrowSite(r.u32(), r.u32(), r.u32(), r.u32()) if r.flag() else None
    kind = enum_at(_ERROR_KINDS, r.u8(), "error kind")
    source = enum_at(_ERROR_SOURCES, r.u8(), "error source")
    return ErrorCapture(
        capture_id, throw_call, context, function_id, site, kind, source, read_value_state(r)
    )


def _put_terminal(w: Writer, f: TerminalErrorRef) -> None:
    w.raw(TERMINAL_ERROR_MAGIC)
    w.u16(ERROR_CODEC_VERSION)
    put_call(w, f.call)
    if isinstance(f.target, ErrorCaptureId):
        w.u8(0)
        _put_error_id(w, f.target)
    else:
        w.u8(1)
        w.u8(int(f.target))


def _read_terminal(r: Reader) -> TerminalErrorRef:
    _nested_header(r, TERMINAL_ERROR_MAGIC, EvidenceIssue.INVALID_TERMINAL_REF)
    call = read_call(r)
    tag = r.u8()
    if tag == 0:
        return TerminalErrorRef(call, _read_error_id(r))
    if tag == 1:
        return TerminalErrorRef(call, enum_at(_CAPTURE_LOSSES, r.u8(), "error capture loss"))
    raise InvalidKind(f"terminal error target tag {tag} (valid: 0-1)")


def _put_thread_start(w: Writer, f: ThreadStart) -> None:
    if len(f.name.encode("utf-8", "surrogatepass")) > MAX_THREAD_NAME_LEN:
        raise EncodeError(f"thread name longer than {MAX_THREAD_NAME_LEN} bytes: {f.name[:40]!r}")
    put_thread(w, f.thread)
    w.opt(f.parent, lambda p: put_thread(w, p))
    w.opt(f.spawn_call, lambda c: put_call(w, c))
    w.opt(f.spawn_site, lambda s: put_site(w, s))
    w.u64(f.started_ns)
    w.u8(int(f.kind))
    w.string(f.name)


def _read_thread_start(r: Reader) -> ThreadStart:
    thread = read_thread(r)
    parent = read_thread(r) if r.flag() else None
    spawn_call = read_call(r) if r.flag() else None
    spawn_site = read_site(r) if r.flag() else None
    started_ns = r.u64()
    kind = enum_at(_THREAD_KINDS, r.u8(), "thread kind")
    name = r.string()
    if len(name.encode("utf-8")) > MAX_THREAD_NAME_LEN:
        raise InvalidEvidence(
            EvidenceIssue.THREAD_NAME_TOO_LONG, f"thread name over {MAX_THREAD_NAME_LEN} bytes"
        )
    return ThreadStart(thread, parent, spawn_call, spawn_site, started_ns, kind, name)


def _put_thread_end(w: Writer, f: ThreadEnd) -> None:
    put_thread(w, f.thread)
    w.u64(f.ended_ns)
    w.u8(int(f.status))


def _read_thread_end(r: Reader) -> ThreadEnd:
    thread, ended = read_thread(r), r.u64()
    return ThreadEnd(thread, ended, enum_at(_THREAD_STATUSES, r.u8(), "thread end status"))


def _encodable_bits(value: int, what: str) -> int:
    if not 0 <= value <= BITS_MASK:
        raise EncodeError(f"{what} {value!r} sets bits above 2")
    return value


# --- framing -----------------------------------------------------------------------------------


_ENCODERS: dict[type, tuple[int, Callable[[Writer, Any], None]]] = {
    SpanStart: (0, _put_span_start),
    SpanEnd: (1, _put_span_end),
    SpanRuntimeId: (2, _put_runtime_id),
    ValueOccurrence: (3, _put_occurrence),
    ErrorCapture: (4, _put_error_capture),
    TerminalErrorRef: (5, _put_terminal),
    ThreadStart: (6, _put_thread_start),
    ThreadEnd: (7, _put_thread_end),
}
"""Fact type → (wire tag, body writer); the tags index :data:`_DECODERS`."""


def _put_fact(w: Writer, fact: Fact) -> int:
    """Write the body of ``fact`` and return its tag."""
    entry = _ENCODERS.get(type(fact))
    if entry is None:
        raise EncodeError(f"not an evidence fact: {type(fact).__name__}")
    tag, put = entry
    put(w, fact)
    return tag


_DECODERS: tuple[Callable[[Reader], Fact], ...] = (
    _read_span_start,
    _read_span_end,
    _read_runtime_id,
    _read_occurrence,
    _read_error_capture,
    _read_terminal,
    _read_thread_start,
    _read_thread_end,
)


def encode_fact(fact: Fact) -> bytes:
    """``u8 tag ‖ u32 body_len ‖ body`` for one fact."""
    w = Writer()
    tag = _put_fact(w, fact)
    body = w.getvalue()
    return bytes([tag]) + len(body).to_bytes(4, "big") + body


def encode_evidence_payload(facts: Sequence[Fact]) -> bytes:
    """``u64 fact_count ‖ fact*``; refuses a second ThreadStart/ThreadEnd for one thread."""
    for kind in (ThreadStart, ThreadEnd):
        threads = [fact.thread for fact in facts if isinstance(fact, kind)]
        if len(set(threads)) != len(threads):
            raise EncodeError(f"two {kind.__name__} facts for one thread in one payload")
    return len(facts).to_bytes(8, "big") + b"".join(encode_fact(fact) for fact in facts)


def decode_evidence_payload(raw: Buffer, count: int) -> tuple[Fact, ...]:
    """Decode an evidence payload whose group header announced ``count`` facts."""
    r = Reader(raw)
    fact_count = r.u64()
    if fact_count > r.remaining // MIN_FACT_BYTES:
        raise Truncated(f"{fact_count} facts cannot fit in {r.remaining} bytes")
    facts: list[Fact] = []
    started: set[object] = set()
    ended: set[object] = set()
    for index in range(fact_count):
        tag = r.u8()
        body = Reader(r.view(r.u32()))
        if tag >= len(_DECODERS):
            raise InvalidEvidence(EvidenceIssue.UNKNOWN_TAG, f"fact {index} has tag {tag}")
        try:
            fact = _DECODERS[tag](body)
            body.finish()
        except (Truncated, TrailingBytes) as exc:
            raise InvalidEvidence(
                EvidenceIssue.BODY_LENGTH_MISMATCH, f"fact {index} (tag {tag}): {exc}"
            ) from exc
        if isinstance(fact, ThreadStart):
            _first(started, fact.thread, EvidenceIssue.DUPLICATE_THREAD_START)
        elif isinstance(fact, ThreadEnd):
            _first(ended, fact.thread, EvidenceIssue.DUPLICATE_THREAD_END)
        facts.append(fact)
    if r.remaining:
        raise InvalidEvidence(EvidenceIssue.LENGTH_MISMATCH, f"{r.remaining} bytes after facts")
    if fact_count != count:
        raise InvalidEvidence(
            EvidenceIssue.RECORD_COUNT_MISMATCH, f"header says {count}, payload has {fact_count}"
        )
    return tuple(facts)


def _first(seen: set[object], thread: object, issue: EvidenceIssue) -> None:
    if thread in seen:
        raise InvalidEvidence(issue, f"second fact for thread {thread}")
    seen.add(thread)
