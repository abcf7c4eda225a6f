"""Every decoder, fed random or mutated bytes, raises only ``SegmentReadError`` subclasses.

Mutations of checksummed files are tried twice: as is (the checksum catches them) and with the
trailing SHA-256 recomputed, so the structural decoder behind the checksum is exercised too.
Any exception other than a ``SegmentReadError`` (IndexError, struct.error, ValueError,
UnicodeDecodeError, KeyError, ...) propagates and fails the test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from format_fixtures import rich_data_segment, rich_meta_segment
from format_strategies import (
    cct_sections,
    data_segments,
    fact_lists,
    function_tables,
    meta_segments,
    thread_refs,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.format.cas import decode_cas_object, encode_cas_object
from baml_studio.format.cct import decode_cct_payload, encode_cct_payload
from baml_studio.format.data import decode_data_segment, encode_data_segment
from baml_studio.format.errors import SegmentReadError
from baml_studio.format.evidence import decode_evidence_payload, encode_evidence_payload
from baml_studio.format.function_table import decode_function_table, encode_function_table
from baml_studio.format.ids import (
    CallRef,
    ThreadRef,
    parse_runtime_id_wire,
    parse_value_cid_wire,
    runtime_id_wire,
    value_cid_wire,
)
from baml_studio.format.meta import decode_meta_segment, encode_meta_segment

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


def survives(decode: Callable[..., Any], raw: Any, *args: Any) -> bool:
    """True if ``decode`` accepted the input, False if it raised a typed error."""
    try:
        decode(raw, *args)
    except SegmentReadError:
        return False
    return True


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF]))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=9))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 9))]
    return bytes(data)


def rechecksum(raw: bytes) -> bytes:
    body = raw[:-32] if len(raw) >= 32 else raw
    return body + hashlib.sha256(body).digest()


def mutate_file(encoded: bytes, data: st.DataObject) -> bytes:
    """A mutation of a checksummed file, with the checksum recomputed half the time."""
    body = data.draw(mutated(encoded[:-32]))
    if data.draw(st.booleans()):
        return body + hashlib.sha256(body).digest()
    return data.draw(mutated(encoded))


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "meta": decode_meta_segment,
    "data": decode_data_segment,
    "data_roots": lambda raw: decode_data_segment(raw, roots=[ThreadRef(b"\x01" * 16, 0, 0)]),
    "cas": decode_cas_object,
    "function_table": decode_function_table,
    "cct": lambda raw: decode_cct_payload(raw, 1, 0),
    "evidence": lambda raw: decode_evidence_payload(raw, 1),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(raw=st.binary(max_size=400))
def test_random_bytes(name: str, raw: bytes) -> None:
    survives(DECODERS[name], raw)
    survives(DECODERS[name], rechecksum(raw))


@FUZZ
@given(meta_segments(), st.data())
def test_mutated_meta_segments(seg: Any, data: st.DataObject) -> None:
    survives(decode_meta_segment, mutate_file(encode_meta_segment(seg), data))


@FUZZ
@given(data_segments(), st.data())
def test_mutated_data_segments(seg: Any, data: st.DataObject) -> None:
    raw = mutate_file(encode_data_segment(seg), data)
    survives(decode_data_segment, raw)
    roots = [g.root for g in seg.groups[:1]] + [data.draw(thread_refs)]
    survives(lambda r: decode_data_segment(r, roots=roots), raw)


@FUZZ
@given(cct_sections, st.data())
def test_mutated_cct_payloads(section: Any, data: st.DataObject) -> None:
    raw = data.draw(mutated(encode_cct_payload(section)))
    count = len(section.contexts) + len(section.overflows)
    survives(decode_cct_payload, raw, count, section.health)
    survives(
        decode_cct_payload, raw, data.draw(st.integers(0, 1 << 64)), data.draw(st.integers(0, 255))
    )


@FUZZ
@given(fact_lists, st.data())
def test_mutated_evidence_payloads(facts: Any, data: st.DataObject) -> None:
    raw = data.draw(mutated(encode_evidence_payload(facts)))
    survives(decode_evidence_payload, raw, len(facts))


@FUZZ
@given(function_tables(), st.data())
def test_mutated_function_tables(table: Any, data: st.DataObject) -> None:
    survives(decode_function_table, data.draw(mutated(encode_function_table(table))))


@FUZZ
@given(st.integers(0, 3), st.binary(max_size=64), st.data())
def test_mutated_cas_objects(codec: int, body: bytes, data: st.DataObject) -> None:
    survives(decode_cas_object, mutate_file(encode_cas_object(codec, body), data))


WIRE_PARSERS: dict[str, Callable[[str], Any]] = {
    "thread": ThreadRef.parse_wire,
    "call": CallRef.parse_wire,
    "runtime": parse_runtime_id_wire,
    "cid": parse_value_cid_wire,
}


@FUZZ
@given(thread_refs, st.data())
def test_mutated_wire_ids(thread: ThreadRef, data: st.DataObject) -> None:
    valid = {
        "thread": thread.wire(),
        "call": CallRef(thread, 1).wire(),
        "runtime": runtime_id_wire(thread.euid),
        "cid": value_cid_wire(thread.to_bytes()),
    }
    for name, parse in WIRE_PARSERS.items():
        text = data.draw(mutated(valid[name].encode())).decode("latin-1")
        survives(parse, text)
        survives(parse, data.draw(st.text(max_size=80)))
        survives(parse, valid[name][: data.draw(st.integers(0, len(valid[name])))])


# --- exhaustive single-byte mutations of rich fixtures (every record and fact kind) -----------


@pytest.mark.parametrize(
    ("encoded", "decode"),
    [
        (encode_meta_segment(rich_meta_segment()), decode_meta_segment),
        (encode_data_segment(rich_data_segment()), decode_data_segment),
    ],
    ids=["meta", "data"],
)
def test_every_truncation_and_byte_change_behind_a_valid_checksum(
    encoded: bytes, decode: Callable[[bytes], Any]
) -> None:
    body = encoded[:-32]
    assert survives(decode, encoded)
    for cut in range(len(body)):
        assert not survives(decode, rechecksum(body[:cut] + bytes(32)))
    accepted = 0
    for pos in range(len(body)):
        for value in {0x00, 0xFF, body[pos] ^ 0x01}:
            if value != body[pos]:
                changed = body[:pos] + bytes([value]) + body[pos + 1 :]
                accepted += survives(decode, changed + hashlib.sha256(changed).digest())
    assert accepted > 0  # payload bytes such as timestamps may change freely
