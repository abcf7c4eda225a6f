"""Data segments (``*.bamldata``, magic ``BAMLDAT1``, schema version 2; reference facts §2).

Layout::

    BAMLDAT1 ‖ u16 schema_version ‖ u64 sequence ‖ process_euid[16] ‖ u64 group_count
    ‖ u64 payload_len ‖ group* ‖ SHA-256(everything before)
    group := root ThreadRef(32) ‖ u8 cct_health ‖ u64 cct_record_count ‖ u64 cct_len ‖ cct_payload
             ‖ u64 evidence_record_count ‖ u64 evidence_len ‖ evidence_payload

Groups are strictly ascending by the 32 root bytes, one per execution, never both payloads
empty. A group without CCT deltas has ``cct_len = 0, cct_record_count = 0, cct_health = 0``; a
group without facts has ``evidence_len = 0, evidence_record_count = 0``. A CCT section that has
no rows but carries health bits is written as a full (16-byte) payload so the bits survive.
"""

from __future__ import annotations

import struct
from collections.abc import Collection

from baml_studio.format.binio import (
    Buffer,
    Reader,
    Writer,
    put_thread,
    read_thread,
    segment_header,
    with_checksum,
)
from baml_studio.format.cct import check_health, decode_cct_payload, encode_cct_payload
from baml_studio.format.errors import (
    DataDuplicateGroup,
    DataEmptyGroup,
    DataGroupOrder,
    EncodeError,
    Truncated,
)
from baml_studio.format.evidence import decode_evidence_payload, encode_evidence_payload
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    DATA_MAGIC,
    SCHEMA_VERSION,
    CctSection,
    DataGroup,
    DataSegment,
)

DATA_HEADER_BYTES = 50
GROUP_PREFIX_BYTES = 49  # root(32) ‖ health(1) ‖ cct_record_count(8) ‖ cct_len(8)
MIN_GROUP_BYTES = GROUP_PREFIX_BYTES + 16
_GROUP_HEAD = struct.Struct(">32sBQQ")
_COUNT_LEN = struct.Struct(">QQ")


def encode_data_group(group: DataGroup) -> bytes:
    """One group's bytes. Raises ``EncodeError`` for a group with neither CCT rows nor facts."""
    cct = group.cct
    cct_bytes = b"" if cct.is_empty() and cct.health == 0 else encode_cct_payload(cct)
    cct_count = len(cct.contexts) + len(cct.overflows)
    evidence_bytes = encode_evidence_payload(group.evidence) if group.evidence else b""
    if not cct_bytes and not evidence_bytes:
        raise EncodeError(f"group {group.root.wire()} has no CCT rows and no evidence facts")
    if cct.health & ~0b111:
        raise EncodeError(f"CCT health {cct.health:#04x} sets bits other than 0-2")
    w = Writer()
    put_thread(w, group.root)
    w.u8(cct.health)
    w.u64(cct_count)
    w.u64(len(cct_bytes))
    w.raw(cct_bytes)
    w.u64(len(group.evidence))
    w.u64(len(evidence_bytes))
    w.raw(evidence_bytes)
    return w.getvalue()


def encode_data_segment(seg: DataSegment) -> bytes:
    """The whole ``.bamldata`` file. Groups must already be strictly ascending by root bytes."""
    roots = [group.root.to_bytes() for group in seg.groups]
    for index in range(1, len(roots)):
        if roots[index - 1] >= roots[index]:
            raise EncodeError(
                f"data groups must be strictly ascending by root: group {index} "
                f"({seg.groups[index].root.wire()}) does not sort after group {index - 1}"
            )
    payload = b"".join(encode_data_group(group) for group in seg.groups)
    w = Writer()
    w.raw(DATA_MAGIC)
    w.u16(SCHEMA_VERSION)
    w.u64(seg.sequence)
    w.fixed(seg.process_euid, 16, "process_euid")
    w.u64(len(seg.groups))
    w.u64(len(payload))
    w.raw(payload)
    return with_checksum(w.getvalue())


def decode_data_segment(
    raw: Buffer,
    *,
    expected_euid: bytes | None = None,
    roots: Collection[ThreadRef] | None = None,
) -> DataSegment:
    """Decode a ``.bamldata`` file.

    With ``roots``, only groups of those executions are decoded and returned; the others are
    skipped by slice arithmetic (their framing, order and health byte are still checked).
    """
    r, sequence, euid = segment_header(raw, DATA_MAGIC, "data", SCHEMA_VERSION, expected_euid)
    group_count = r.u64()
    payload = Reader(r.view(r.u64()))
    r.finish()
    if group_count > payload.remaining // MIN_GROUP_BYTES:
        raise Truncated(f"{group_count} groups cannot fit in {payload.remaining} bytes")
    wanted = None if roots is None else {root.to_bytes() for root in roots}
    groups: list[DataGroup] = []
    previous = b""
    for index in range(group_count):
        root_bytes, health, cct_count, cct_len = payload.unpack(_GROUP_HEAD)
        if root_bytes == previous:
            raise DataDuplicateGroup(f"group {index} repeats root {root_bytes.hex()}")
        if root_bytes < previous:
            raise DataGroupOrder(f"group {index} root sorts before its predecessor's")
        previous = root_bytes
        check_health(health)
        cct_view = payload.view(cct_len)
        evidence_count, evidence_len = payload.unpack(_COUNT_LEN)
        evidence_view = payload.view(evidence_len)
        if cct_len == 0 and evidence_len == 0:
            raise DataEmptyGroup(f"group {index} ({root_bytes.hex()}) has both payloads empty")
        if wanted is not None and root_bytes not in wanted:
            continue
        groups.append(
            DataGroup(
                read_thread(Reader(root_bytes)),
                _decode_cct(cct_view, cct_count, health),
                decode_evidence_payload(evidence_view, evidence_count)
                if evidence_len or evidence_count
                else (),
            )
        )
    payload.finish()
    return DataSegment(sequence, euid, tuple(groups))


def _decode_cct(view: memoryview, count: int, health: int) -> CctSection:
    if not view and count == 0:
        return CctSection(health=health)
    return decode_cct_payload(view, count, health)
