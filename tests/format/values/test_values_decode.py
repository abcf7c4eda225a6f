"""Decoder rules beyond the schema, and fuzzing: bad bytes raise only ValueCorrupt."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from value_strategies import values

from baml_studio.format.errors import SegmentReadError, ValueCorrupt
from baml_studio.format.values import (
    NULL,
    BigInt,
    Class,
    Int,
    List,
    Map,
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
    ValueTooDeep,
    decode_value,
    encode_value,
)
from baml_studio.format.values.decode import DEFAULT_MAX_DEPTH, UNKNOWN_VARIANT


def ld(tag: bytes, payload: bytes) -> bytes:
    assert len(payload) < 128
    return tag + bytes([len(payload)]) + payload


def entry(key: bytes, value: bytes, tag: bytes = b"\x12") -> bytes:
    return ld(tag, ld(b"\x0a", key) + ld(b"\x12", value))


def omitted_class(*fields: bytes) -> bytes:
    return ld(b"\x3a", ld(b"\x0a", b"baml.trace.OmittedValue") + b"".join(fields))


def test_bigint_hex_to_minimal_decimal() -> None:
    assert decode_value(ld(b"\xa2\x01", b"FF")) == BigInt("255")
    assert decode_value(ld(b"\xa2\x01", b"000ff")) == BigInt("255")
    assert decode_value(ld(b"\xa2\x01", b"-0")) == BigInt("0")
    assert decode_value(ld(b"\xa2\x01", b"-1A")) == BigInt("-26")


@pytest.mark.parametrize("bad", [b"", b"-", b"xyz", b"0x1f", b"1_0", b" 1", b"+1", b"--1"])
def test_bigint_that_is_not_hex_is_corrupt(bad: bytes) -> None:
    with pytest.raises(ValueCorrupt, match="bigint"):
        decode_value(ld(b"\xa2\x01", bad))


def test_bigint_beyond_python_str_limit_is_omitted() -> None:
    body = b"\xa2\x01" + bytes([0x90, 0x1C]) + b"f" * 3600  # 3600 hex digits > 4300 decimal
    value = decode_value(body)
    assert isinstance(value, Omitted) and value.reason.startswith("bigint_too_large")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ((entry(b"reason", b"\x1a\x01r"), entry(b"message", b"\x1a\x01m")), "r: m"),
        ((entry(b"message", b"\x1a\x01m"), entry(b"reason", b"\x1a\x01r")), "r: m"),
        ((entry(b"reason", b"\x1a\x01r"),), "r"),
        ((entry(b"message", b"\x1a\x01m"),), "m"),
        ((), ""),
        ((entry(b"reason", b"\x20\x01"), entry(b"other", b"\x1a\x01x")), ""),  # non-string
    ],
)
def test_omitted_value_class(fields: tuple[bytes, ...], reason: str) -> None:
    assert decode_value(omitted_class(*fields)) == Omitted(reason)


def test_unknown_variant_is_omitted() -> None:
    assert decode_value(b"") == Omitted(UNKNOWN_VARIANT)
    assert decode_value(b"\x6a\x00") == Omitted(UNKNOWN_VARIANT)  # field 13, a future variant
    assert decode_value(b"\xf8\x06\x05") == Omitted(UNKNOWN_VARIANT)  # field 111, varint
    assert decode_value(ld(b"\x62", ld(b"\x1a", b"\x0a\x01k"))) == Map(
        (("k", Omitted(UNKNOWN_VARIANT)),)
    )


def test_unknown_fields_of_every_skippable_wire_type_are_skipped() -> None:
    unknown = (
        b"\x98\x06\x01"  # field 99 varint
        + b"\x99\x06"
        + b"\x00" * 8  # field 99 fixed64
        + b"\x9a\x06\x02ab"  # field 99 length-delimited
        + b"\x9d\x06"
        + b"\x00" * 4  # field 99 fixed32
    )
    assert decode_value(unknown + b"\x1a\x02hi") == String("hi")
    assert decode_value(ld(b"\x12", unknown)) == NULL
    assert decode_value(ld(b"\x5a", unknown + ld(b"\x12", b"\x20\x01"))) == List((Int(1),))
    klass = ld(b"\x3a", unknown + ld(b"\x0a", b"C") + b"\x1a\x00" + entry(b"f", b"\x12\x00"))
    assert decode_value(klass) == Class("C", (("f", NULL),))  # type_args (3) ignored
    media = ld(b"\x8a\x01", unknown + b"\x08\x02" + ld(b"\x2a", b"p"))
    assert decode_value(media) == Media(MediaKind.AUDIO, None, "file", "p")


def test_last_oneof_member_wins() -> None:
    assert decode_value(b"\x20\x01\x1a\x02hi") == String("hi")
    assert decode_value(b"\x1a\x02hi\x20\x01") == Int(1)


def test_media_kind_beyond_the_enum_is_other() -> None:
    assert decode_value(ld(b"\x8a\x01", b"\x08\x09")).kind is MediaKind.OTHER  # type: ignore[union-attr]


def test_overlong_but_ten_byte_varint_is_truncated_to_64_bits() -> None:
    assert decode_value(b"\x20" + b"\xff" * 9 + b"\x7f") == Int(-1)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\x22\x01x", "wire type"),  # int (4) as length-delimited
        (b"\x18\x01", "wire type"),  # string (3) as varint
        (b"\x2d\x00\x00\x00\x00", "wire type"),  # float (5) as fixed32
        (b"\x1b", "wire type 3"),  # group start
        (b"\x1c", "wire type 4"),  # group end
        (b"\x02\x00", "field number 0"),
        (b"\x20", "truncated varint"),
        (b"\x20" + b"\xff" * 10 + b"\x01", "10 bytes"),
        (b"\x1a\x05hi", "past"),
        (b"\x29\x00\x00", "past"),
        (b"\x1a\x02\xff\xfe", "UTF-8"),
        (b"\x1a\x02\xed\xa0", "UTF-8"),  # an encoded surrogate is not UTF-8
        (ld(b"\x62", ld(b"\x1a", b"\x08\x01")), "PbMapEntry.key"),
        (ld(b"\x5a", b"\x10\x01"), "field 2"),
        (ld(b"\x8a\x01", b"\x0a\x00"), "PbMedia.media"),
        (ld(b"\x42", b"\x10\x00"), "string field 2"),
        (ld(b"\x12", b"\x1b"), "wire type 3"),  # inside PbNull
        (b"\xff\xff\xff\xff\x7f", "field number"),  # key above 32 bits
    ],
)
def test_malformed_bodies_are_corrupt(body: bytes, match: str) -> None:
    with pytest.raises(ValueCorrupt, match=match):
        decode_value(body)


def nested_lists(depth: int) -> bytes:
    body = b"\x12\x00"
    for _ in range(depth):
        item = b"\x12" + _varint(len(body)) + body
        body = b"\x5a" + _varint(len(item)) + item
    return body


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_depth_cap_raises_value_too_deep() -> None:
    assert isinstance(decode_value(nested_lists(DEFAULT_MAX_DEPTH)), List)
    with pytest.raises(ValueTooDeep, match="max_depth=100"):
        decode_value(nested_lists(DEFAULT_MAX_DEPTH + 1))
    assert isinstance(decode_value(nested_lists(5), max_depth=5), List)
    with pytest.raises(ValueTooDeep):
        decode_value(nested_lists(5), max_depth=4)
    assert issubclass(ValueTooDeep, ValueCorrupt)


def test_stack_exhaustion_is_value_too_deep_not_recursion_error() -> None:
    with pytest.raises(ValueTooDeep):
        decode_value(nested_lists(5_000), max_depth=10**9)


def test_accepts_bytearray_and_memoryview() -> None:
    assert decode_value(bytearray(b"\x1a\x02hi")) == String("hi")
    assert decode_value(memoryview(b"\x1a\x02hi")) == String("hi")


def _decode_or_corrupt(body: bytes) -> None:
    try:
        value = decode_value(body)
    except ValueCorrupt:
        return
    except SegmentReadError as exc:  # pragma: no cover - the assertion below explains
        raise AssertionError(f"decoder raised {type(exc).__name__}, not ValueCorrupt") from exc
    encode_value(value)  # whatever decodes must re-encode


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(body: bytes) -> None:
    _decode_or_corrupt(body)


@settings(max_examples=300)
@given(values, st.randoms(use_true_random=False))
def test_fuzz_mutated_valid_bodies(value: Value, rnd: random.Random) -> None:
    body = bytearray(encode_value(value))
    for _ in range(rnd.randint(1, 4)):
        op, pos = rnd.randrange(3), rnd.randrange(len(body) + 1)
        if op == 0 and pos < len(body):
            body[pos] = rnd.randrange(256)
        elif op == 1:
            body.insert(pos, rnd.randrange(256))
        elif pos < len(body):
            del body[pos]
    _decode_or_corrupt(bytes(body))


@settings(max_examples=50)
@given(values)
def test_every_truncation_of_a_valid_body(value: Value) -> None:
    body = encode_value(value)
    for cut in range(len(body)):
        _decode_or_corrupt(body[:cut])
