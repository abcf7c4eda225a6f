"""The CCT section of a data group: calling-context deltas (reference facts §3.2).

::

    cct_payload := u64 context_count ‖ context* ‖ u64 overflow_count ‖ overflow*
    context     := key[32] ‖ opt tuple ‖ counters
    tuple       := program_id[16] ‖ opt parent_key[32] ‖ function_id u32
                   ‖ opt(file_id u32 ‖ start_offset u32 ‖ end_offset u32 ‖ line u32) ‖ edge_kind u8
    overflow    := reason u8 ‖ edge_kind u8 ‖ counters
    counters    := 6 × u64 ‖ inclusive_ns u128 ‖ direct_call_child_inclusive_ns u128
                   ‖ await_ns u128 ‖ await_count u64                                (104 bytes)

``ContextKey = SHA-256("baml-cct-context-v1" ‖ tuple)``. The health byte and the record count
live in the data-group header and are passed in by the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Iterable

from baml_studio.format.binio import Buffer, Reader, Writer, enum_at, put_site, read_site
from baml_studio.format.errors import CctIssue, EncodeError, InvalidCct, Truncated
from baml_studio.format.records import (
    CCT_AWAIT_COUNTER_SATURATED,
    CCT_COUNTER_SATURATED,
    CCT_SELF_TIME_UNDERFLOW,
    CctContext,
    CctCounters,
    CctOverflow,
    CctSection,
    CctTuple,
    EdgeKind,
    OverflowReason,
)

CONTEXT_DOMAIN = b"baml-cct-context-v1"
CCT_HEALTH_MASK = CCT_COUNTER_SATURATED | CCT_AWAIT_COUNTER_SATURATED | CCT_SELF_TIME_UNDERFLOW
MIN_CONTEXT_BYTES = 137
MIN_OVERFLOW_BYTES = 106
U64_MAX = (1 << 64) - 1
U128_MAX = (1 << 128) - 1
_COUNTERS = struct.Struct(">6Q16s16s16sQ")
_EDGES = tuple(EdgeKind)
_REASONS = tuple(OverflowReason)
_COUNTER_FIELDS = tuple(f.name for f in dataclasses.fields(CctCounters))
# (limit, health bit) per counter field, in wire order
_LIMITS = (
    *((U64_MAX, CCT_COUNTER_SATURATED),) * 6,
    (U128_MAX, CCT_COUNTER_SATURATED),
    (U128_MAX, CCT_COUNTER_SATURATED),
    (U128_MAX, CCT_AWAIT_COUNTER_SATURATED),
    (U64_MAX, CCT_AWAIT_COUNTER_SATURATED),
)


def _put_tuple(w: Writer, t: CctTuple) -> None:
    w.fixed(t.program_id, 16, "program_id")
    w.opt(t.parent_key, lambda key: w.fixed(key, 32, "parent_key"))
    w.u32(t.function_id)
    w.opt(t.call_site, lambda site: put_site(w, site))
    w.u8(int(t.edge_kind))


def _read_tuple(r: Reader) -> CctTuple:
    program_id = r.raw(16)
    parent = r.raw(32) if r.flag() else None
    function_id = r.u32()
    site = read_site(r) if r.flag() else None
    return CctTuple(program_id, parent, function_id, site, enum_at(_EDGES, r.u8(), "edge_kind"))


def context_key(t: CctTuple) -> bytes:
    """``ContextKey::for_tuple``: SHA-256 of the domain string and the tuple's wire bytes."""
    w = Writer()
    w.raw(CONTEXT_DOMAIN)
    _put_tuple(w, t)
    return hashlib.sha256(w.getvalue()).digest()


def _put_counters(w: Writer, c: CctCounters) -> None:
    w.u64(c.invocations_started)
    w.u64(c.spans_selected)
    w.u64(c.completed_ok)
    w.u64(c.completed_error)
    w.u64(c.completed_cancelled)
    w.u64(c.completed_exit)
    w.u128(c.inclusive_ns)
    w.u128(c.direct_call_child_inclusive_ns)
    w.u128(c.await_ns)
    w.u64(c.await_count)


def _read_counters(r: Reader) -> CctCounters:
    a, b, c, d, e, f, inclusive, direct, await_ns, await_count = r.unpack(_COUNTERS)
    return CctCounters(
        a,
        b,
        c,
        d,
        e,
        f,
        int.from_bytes(inclusive, "big"),
        int.from_bytes(direct, "big"),
        int.from_bytes(await_ns, "big"),
        await_count,
    )


def encode_cct_payload(section: CctSection) -> bytes:
    """The payload bytes (without the health byte, which the group header carries)."""
    w = Writer()
    w.u64(len(section.contexts))
    for ctx in section.contexts:
        w.fixed(ctx.key, 32, "ContextKey")
        if ctx.tuple is not None and context_key(ctx.tuple) != ctx.key:
            raise EncodeError(f"context key {ctx.key.hex()} is not the SHA-256 of its tuple")
        w.opt(ctx.tuple, lambda t: _put_tuple(w, t))
        _put_counters(w, ctx.counters)
    w.u64(len(section.overflows))
    for ovf in section.overflows:
        w.u8(int(ovf.reason))
        w.u8(int(ovf.edge_kind))
        _put_counters(w, ovf.counters)
    return w.getvalue()


def check_health(health: int) -> int:
    """The ``CounterHealth`` byte; any bit other than 0–2 is ``InvalidCct(INVALID_HEALTH)``."""
    if health & ~CCT_HEALTH_MASK:
        raise InvalidCct(CctIssue.INVALID_HEALTH, f"health byte {health:#04x} (valid bits: 0-2)")
    return health


def decode_cct_payload(raw: Buffer, record_count: int, health: int) -> CctSection:
    """Decode a CCT payload, checking it against the group header's count and health byte."""
    check_health(health)
    r = Reader(raw)
    context_count = r.u64()
    if context_count > r.remaining // MIN_CONTEXT_BYTES:
        raise Truncated(f"{context_count} contexts cannot fit in {r.remaining} bytes")
    contexts = []
    for _ in range(context_count):
        key = r.raw(32)
        tup = _read_tuple(r) if r.flag() else None
        if tup is not None and context_key(tup) != key:
            raise InvalidCct(CctIssue.INVALID_CONTEXT_KEY, f"key {key.hex()} != hash of its tuple")
        contexts.append(CctContext(key, tup, _read_counters(r)))
    overflow_count = r.u64()
    if overflow_count > r.remaining // MIN_OVERFLOW_BYTES:
        raise Truncated(f"{overflow_count} overflow rows cannot fit in {r.remaining} bytes")
    overflows = []
    for _ in range(overflow_count):
        reason = enum_at(_REASONS, r.u8(), "overflow reason")
        edge = enum_at(_EDGES, r.u8(), "edge_kind")
        overflows.append(CctOverflow(reason, edge, _read_counters(r)))
    if r.remaining:
        raise InvalidCct(CctIssue.LENGTH_MISMATCH, f"{r.remaining} bytes after the last record")
    if context_count + overflow_count != record_count:
        raise InvalidCct(
            CctIssue.RECORD_COUNT_MISMATCH,
            f"header says {record_count} records, payload has {context_count + overflow_count}",
        )
    return CctSection(health, tuple(contexts), tuple(overflows))


def add_counters(a: CctCounters, b: CctCounters) -> tuple[CctCounters, int]:
    """Field-wise saturating sum; returns the health bits for any counter that saturated."""
    values = []
    health = 0
    for name, (limit, bit) in zip(_COUNTER_FIELDS, _LIMITS, strict=True):
        total = getattr(a, name) + getattr(b, name)
        if total > limit:
            total = limit
            health |= bit
        values.append(total)
    return CctCounters(*values), health


def merge_cct(sections: Iterable[CctSection]) -> CctSection:
    """Merge one execution's CCT deltas (all groups) into one section.

    Contexts merge by ContextKey (a missing tuple is filled from a later delta), overflow rows by
    ``(reason, edge_kind)``; counters add saturating (u64/u128) and set the matching health bit;
    health bytes are OR-ed. The same key with two different tuples is
    ``InvalidCct(CONTEXT_KEY_COLLISION)``. Output is sorted by key and by ``(reason, edge)``.
    """
    health = 0
    contexts: dict[bytes, CctContext] = {}
    overflows: dict[tuple[int, int], CctOverflow] = {}
    for section in sections:
        health |= section.health
        for ctx in section.contexts:
            seen = contexts.get(ctx.key)
            if seen is None:
                contexts[ctx.key] = ctx
                continue
            if seen.tuple is not None and ctx.tuple is not None and seen.tuple != ctx.tuple:
                raise InvalidCct(
                    CctIssue.CONTEXT_KEY_COLLISION, f"key {ctx.key.hex()} has two different tuples"
                )
            counters, bits = add_counters(seen.counters, ctx.counters)
            health |= bits
            contexts[ctx.key] = CctContext(ctx.key, seen.tuple or ctx.tuple, counters)
        for ovf in section.overflows:
            slot = (int(ovf.reason), int(ovf.edge_kind))
            prior = overflows.get(slot)
            if prior is None:
                overflows[slot] = ovf
                continue
            counters, bits = add_counters(prior.counters, ovf.counters)
            health |= bits
            overflows[slot] = CctOverflow(ovf.reason, ovf.edge_kind, counters)
    return CctSection(
        health,
        tuple(contexts[key] for key in sorted(contexts)),
        tuple(overflows[slot] for slot in sorted(overflows)),
    )


def self_ns(counters: CctCounters) -> tuple[int, bool]:
    """``inclusive - direct_child_inclusive - await``, clamped at 0, and whether it underflowed.

    Spawned children are never subtracted (they are not in ``direct_call_child_inclusive_ns``).
    """
    value = counters.inclusive_ns - counters.direct_call_child_inclusive_ns - counters.await_ns
    return (value, False) if value >= 0 else (0, True)
