"""Meta segments (``*.bamlmeta``, magic ``BAMLMET1``, schema version 2; reference facts §2, §3.1).

Layout::

    BAMLMET1 ‖ u16 schema_version ‖ u64 sequence ‖ process_euid[16] ‖ u64 data_high_water
    ‖ u64 record_count ‖ u64 payload_len ‖ payload ‖ SHA-256(everything before)
    payload := { u8 tag ‖ u32 body_len ‖ body }*

The decoder validates the checksum before anything else, then magic, version, euid, every
record body length exactly, and that nothing trails. The encoder refuses what the decoder would
reject (reserved RootEnded flag bits, a misplaced StreamStarted).
"""

from __future__ import annotations

import struct

from baml_studio.format.binio import (
    Buffer,
    Reader,
    Writer,
    put_thread,
    segment_header,
    with_checksum,
)
from baml_studio.format.errors import (
    EncodeError,
    InvalidKind,
    MetaInvalidHealth,
    MetaInvalidStatus,
    MetaStreamStartedMisplaced,
    MetaUnknownTag,
    Truncated,
)
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    HEALTH_BYTES,
    HEALTH_FIELDS,
    META_MAGIC,
    ROOT_ENDED_FLAG_ROOT_STARTED_LOST,
    SCHEMA_VERSION,
    EngineStarted,
    ExecutionHealth,
    MetaRecord,
    MetaSegment,
    RootEnded,
    RootStarted,
    RootStatus,
    StreamStarted,
)

TAG_STREAM_STARTED = 0
TAG_ENGINE_STARTED = 1
TAG_ROOT_STARTED = 2
TAG_ROOT_ENDED = 3
META_HEADER_BYTES = 58
_HEALTH = struct.Struct(f">{len(HEALTH_FIELDS)}Q")
_ROOT_STATUSES = tuple(RootStatus)
_RESERVED_FLAGS = 0xFF & ~ROOT_ENDED_FLAG_ROOT_STARTED_LOST


def encode_meta_record(rec: MetaRecord) -> bytes:
    """``u8 tag ‖ u32 body_len ‖ body`` for one meta record."""
    w = Writer()
    if isinstance(rec, StreamStarted):
        tag = TAG_STREAM_STARTED
        w.u32(rec.pid)
        w.u64(rec.zero_unix_ns)
        w.string(rec.baml_version)
        w.string(rec.os_arch)
    elif isinstance(rec, EngineStarted):
        tag = TAG_ENGINE_STARTED
        w.u64(rec.engine_id)
        w.fixed(rec.program_id, 16, "program_id")
        w.opt(rec.function_table_cid, lambda cid: w.fixed(cid, 32, "function_table_cid"))
        w.opt(rec.revision_label, w.string)
        w.opt(rec.source_label, w.string)
    elif isinstance(rec, RootStarted):
        tag = TAG_ROOT_STARTED
        put_thread(w, rec.root)
        w.u64(rec.started_ns)
        w.fixed(rec.runtime_id, 16, "runtime_id")
    elif isinstance(rec, RootEnded):
        tag = TAG_ROOT_ENDED
        if rec.flags & _RESERVED_FLAGS:
            raise EncodeError(f"RootEnded flags {rec.flags:#04x} set reserved bits 1-7")
        put_thread(w, rec.root)
        w.u64(rec.ended_ns)
        w.u8(int(rec.status))
        w.u8(rec.flags)
        w.u64(rec.data_first_seq)
        w.u64(rec.data_last_seq)
        w.u64(rec.data_segment_count)
        w.u32(HEALTH_BYTES)
        try:
            w.raw(_HEALTH.pack(*rec.health.values()))
        except struct.error as exc:
            raise EncodeError(f"a RootEnded health counter is not a u64: {rec.health}") from exc
    else:
        raise EncodeError(f"not a meta record: {type(rec).__name__}")
    body = w.getvalue()
    return bytes([tag]) + len(body).to_bytes(4, "big") + body


def encode_meta_segment(seg: MetaSegment) -> bytes:
    """The whole ``.bamlmeta`` file, trailing SHA-256 included."""
    payload = bytearray()
    for index, rec in enumerate(seg.records):
        if isinstance(rec, StreamStarted) and (seg.sequence != 1 or index != 0):
            raise EncodeError("StreamStarted may only be record 0 of meta sequence 1")
        payload += encode_meta_record(rec)
    w = Writer()
    w.raw(META_MAGIC)
    w.u16(SCHEMA_VERSION)
    w.u64(seg.sequence)
    w.fixed(seg.process_euid, 16, "process_euid")
    w.u64(seg.data_high_water)
    w.u64(len(seg.records))
    w.u64(len(payload))
    w.raw(payload)
    return with_checksum(w.getvalue())


def decode_meta_segment(raw: Buffer, *, expected_euid: bytes | None = None) -> MetaSegment:
    """Decode a ``.bamlmeta`` file; ``expected_euid`` is the stream directory's euid."""
    r, sequence, euid = segment_header(raw, META_MAGIC, "meta", SCHEMA_VERSION, expected_euid)
    data_high_water = r.u64()
    record_count = r.u64()
    payload = Reader(r.view(r.u64()))
    r.finish()
    if record_count > payload.remaining // 5:
        raise Truncated(f"{record_count} records cannot fit in {payload.remaining} bytes")
    records: list[MetaRecord] = []
    for index in range(record_count):
        tag = payload.u8()
        body = Reader(payload.view(payload.u32()))
        rec = _decode_record(tag, body)
        body.finish()
        if isinstance(rec, StreamStarted) and (sequence != 1 or index != 0):
            raise MetaStreamStartedMisplaced(
                f"StreamStarted at record {index} of meta sequence {sequence} "
                "(allowed only as record 0 of sequence 1)"
            )
        records.append(rec)
    payload.finish()
    return MetaSegment(sequence, euid, data_high_water, tuple(records))


def _decode_record(tag: int, r: Reader) -> MetaRecord:
    if tag == TAG_STREAM_STARTED:
        return StreamStarted(r.u32(), r.u64(), r.string(), r.string())
    if tag == TAG_ENGINE_STARTED:
        return EngineStarted(
            engine_id=r.u64(),
            program_id=r.raw(16),
            function_table_cid=r.raw(32) if r.flag() else None,
            revision_label=r.opt(r.string),
            source_label=r.opt(r.string),
        )
    if tag == TAG_ROOT_STARTED:
        euid, engine, thread, started_ns, runtime_id = r.unpack(_ROOT_STARTED)
        return RootStarted(ThreadRef(euid, engine, thread), started_ns, runtime_id)
    if tag == TAG_ROOT_ENDED:
        return _decode_root_ended(r)
    raise MetaUnknownTag(tag)


_ROOT_ENDED = struct.Struct(">16sQQQBBQQQI")
_ROOT_STARTED = struct.Struct(">16sQQQ16s")


def _decode_root_ended(r: Reader) -> RootEnded:
    euid, engine, thread, ended_ns, status_byte, flags, first, last, count, health_len = r.unpack(
        _ROOT_ENDED
    )
    if status_byte >= len(_ROOT_STATUSES):
        raise MetaInvalidStatus(f"RootEnded status {status_byte} (valid: 0-4)")
    if flags & _RESERVED_FLAGS:
        raise InvalidKind(f"RootEnded flags {flags:#04x} set reserved bits 1-7")
    if health_len != HEALTH_BYTES:
        raise MetaInvalidHealth(f"RootEnded health is {health_len} bytes (must be {HEALTH_BYTES})")
    health = ExecutionHealth(*r.unpack(_HEALTH))
    root = ThreadRef(euid, engine, thread)
    return RootEnded(root, ended_ns, _ROOT_STATUSES[status_byte], flags, first, last, count, health)
