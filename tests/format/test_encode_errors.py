"""Encoders refuse, with ``EncodeError``, anything the decoders would reject or cannot represent."""

from __future__ import annotations

import dataclasses

import pytest
from format_fixtures import CALL, EUID, KEY, ROOT, ROOT2, TUPLE, rich_data_segment

from baml_studio.format.binio import Reader, Writer
from baml_studio.format.cct import decode_cct_payload, encode_cct_payload
from baml_studio.format.data import decode_data_segment, encode_data_group, encode_data_segment
from baml_studio.format.errors import EncodeError
from baml_studio.format.evidence import encode_fact
from baml_studio.format.function_table import FunctionEntry, FunctionTable, encode_function_table
from baml_studio.format.meta import encode_meta_record, encode_meta_segment
from baml_studio.format.records import (
    MAX_STRING_BYTES,
    CctContext,
    CctCounters,
    CctSection,
    DataGroup,
    DataSegment,
    EdgeKind,
    EngineStarted,
    ExecutionHealth,
    FunctionEndStatus,
    MetaSegment,
    NormalContext,
    RootEnded,
    RootStatus,
    SpanEnd,
    SpanStart,
    StreamStarted,
    ThreadKind,
    ThreadStart,
)

SPAN_END = SpanEnd(CALL, 1, FunctionEndStatus.OK, 1)


def test_strings_up_to_64_kib_encode_and_longer_ones_do_not() -> None:
    w = Writer()
    w.string("x" * MAX_STRING_BYTES)
    assert Reader(w.getvalue()).string() == "x" * MAX_STRING_BYTES
    with pytest.raises(EncodeError, match="StringTooLong"):
        Writer().string("x" * (MAX_STRING_BYTES + 1))
    with pytest.raises(EncodeError):
        encode_meta_record(StreamStarted(1, 1, "é" * (MAX_STRING_BYTES // 2 + 1), ""))
    with pytest.raises(EncodeError):
        Writer().string("\udc80")


@pytest.mark.parametrize(
    ("method", "value"),
    [("u8", 256), ("u16", 1 << 16), ("u32", 1 << 32), ("u64", 1 << 64), ("u128", 1 << 128)]
    + [(m, -1) for m in ("u8", "u16", "u32", "u64", "u128")],
)
def test_integers_out_of_range(method: str, value: int) -> None:
    with pytest.raises(EncodeError):
        getattr(Writer(), method)(value)


def test_fixed_width_fields_must_have_their_size() -> None:
    with pytest.raises(EncodeError):
        encode_meta_record(EngineStarted(1, b"\x00" * 15))
    with pytest.raises(EncodeError):
        encode_meta_segment(MetaSegment(1, b"\x00" * 17, 0, ()))


def test_meta_encoder_refuses_what_the_decoder_rejects() -> None:
    ended = RootEnded(ROOT, 1, RootStatus.SUCCEEDED, 0b10, 0, 0, 0, ExecutionHealth())
    with pytest.raises(EncodeError):
        encode_meta_record(ended)
    started = StreamStarted(1, 1, "0.17.0", "linux-x86_64")
    with pytest.raises(EncodeError):
        encode_meta_segment(MetaSegment(2, EUID, 0, (started,)))
    with pytest.raises(EncodeError):
        encode_meta_record(
            dataclasses.replace(ended, flags=0, health=ExecutionHealth(corrupt_records=1 << 64))
        )


def test_evidence_encoder_refuses_bits_and_long_names() -> None:
    span = SpanStart(CALL, None, ROOT, NormalContext(KEY), 7, None, EdgeKind.ROOT, 1, 8, 0)
    with pytest.raises(EncodeError):
        encode_fact(span)
    with pytest.raises(EncodeError):
        encode_fact(dataclasses.replace(span, selection_reasons=0, roles=0x10))
    with pytest.raises(EncodeError):
        encode_fact(ThreadStart(ROOT, None, None, None, 1, ThreadKind.ROOT, "n" * 257))
    assert encode_fact(ThreadStart(ROOT, None, None, None, 1, ThreadKind.ROOT, "n" * 256))
    with pytest.raises(EncodeError):
        encode_fact(object())  # type: ignore[arg-type]


def test_cct_encoder_refuses_a_key_that_is_not_the_tuple_hash() -> None:
    with pytest.raises(EncodeError):
        encode_cct_payload(CctSection(0, (CctContext(b"\x00" * 32, TUPLE, CctCounters()),)))


def test_data_encoder_refuses_unsorted_duplicate_and_empty_groups() -> None:
    one = DataGroup(ROOT, CctSection(), (SPAN_END,))
    two = DataGroup(ROOT2, CctSection(), (SPAN_END,))
    assert decode_data_segment(encode_data_segment(DataSegment(1, EUID, (one, two)))).groups
    for groups in ((two, one), (one, one)):
        with pytest.raises(EncodeError):
            encode_data_segment(DataSegment(1, EUID, groups))
    with pytest.raises(EncodeError):
        encode_data_group(DataGroup(ROOT, CctSection(), ()))
    with pytest.raises(EncodeError):
        encode_data_group(DataGroup(ROOT, CctSection(health=0x08), (SPAN_END,)))


def test_empty_cct_section_is_zero_length_and_health_only_section_survives() -> None:
    raw = encode_data_group(DataGroup(ROOT, CctSection(), (SPAN_END,)))
    assert raw[32:49] == b"\x00" * 17  # health 0, cct_record_count 0, cct_len 0
    health_only = DataGroup(ROOT, CctSection(health=0b100), ())
    raw = encode_data_group(health_only)
    assert raw[32] == 0b100 and int.from_bytes(raw[41:49], "big") == 16
    seg = DataSegment(1, EUID, (health_only,))
    assert decode_data_segment(encode_data_segment(seg)).groups == (health_only,)
    assert decode_cct_payload(raw[49:65], 0, 0b100) == CctSection(health=0b100)


def test_function_table_encoder_requires_ascending_ids() -> None:
    entries = (FunctionEntry(2, "b", "b"), FunctionEntry(1, "a", "a"))
    with pytest.raises(EncodeError):
        encode_function_table(FunctionTable(entries))


def test_rich_fixture_encodes() -> None:
    assert encode_data_segment(rich_data_segment())
