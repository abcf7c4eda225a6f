"""Golden codec-1 byte vectors, worked out by hand from the protobuf wire rules (§4.3)."""

from __future__ import annotations

import struct

import pytest

from baml_studio.format.errors import EncodeError
from baml_studio.format.values import (
    NULL,
    BigInt,
    Bool,
    Bytes,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
    decode_value,
    encode_value,
)

NAME = b"baml.trace.OmittedValue"  # 23 bytes

GOLDEN: list[tuple[str, Value, bytes]] = [
    ("null", NULL, b"\x12\x00"),
    ("string", String("hi"), b"\x1a\x02hi"),
    ("empty string", String(""), b"\x1a\x00"),
    ("int 0 (oneof: written)", Int(0), b"\x20\x00"),
    ("int 1", Int(1), b"\x20\x01"),
    ("int 300", Int(300), b"\x20\xac\x02"),
    ("int -1", Int(-1), b"\x20" + b"\xff" * 9 + b"\x01"),
    ("int i64 max", Int(2**63 - 1), b"\x20" + b"\xff" * 8 + b"\x7f"),
    ("int i64 min", Int(-(2**63)), b"\x20" + b"\x80" * 9 + b"\x01"),
    ("float 1.5", Float(1.5), b"\x29" + b"\x00" * 6 + b"\xf8\x3f"),
    ("float -0.0", Float(-0.0), b"\x29" + b"\x00" * 7 + b"\x80"),
    ("true", Bool(True), b"\x30\x01"),
    ("false", Bool(False), b"\x30\x00"),
    ("bytes", Bytes(b"\x00\xff"), b"\x9a\x01\x02\x00\xff"),
    ("bigint 255", BigInt("255"), b"\xa2\x01\x02ff"),
    ("bigint -26", BigInt("-26"), b"\xa2\x01\x03-1a"),
    ("int past i64", Int(2**63), b"\xa2\x01\x10" + b"8000000000000000"),
    ("empty list", List(()), b"\x5a\x00"),
    # items = 2: 12 02 (20 01), 12 02 (12 00)
    ("list", List((Int(1), NULL)), b"\x5a\x08\x12\x02\x20\x01\x12\x02\x12\x00"),
    ("empty map", Map(()), b"\x62\x00"),
    # entries = 3: 1a 07 (key 0a 01 'a') (value 12 02 (20 01))
    ("map", Map((("a", Int(1)),)), b"\x62\x09\x1a\x07\x0a\x01a\x12\x02\x20\x01"),
    # the empty key is a proto3 default: not written
    ("map empty key", Map((("", Int(1)),)), b"\x62\x06\x1a\x04\x12\x02\x20\x01"),
    (
        "map keeps insertion order",
        Map((("b", Int(2)), ("a", Int(1)))),
        b"\x62\x12\x1a\x07\x0a\x01b\x12\x02\x20\x02\x1a\x07\x0a\x01a\x12\x02\x20\x01",
    ),
    # name = 1: 0a 05 'Point'; fields = 2: 12 07 (0a 01 'x') (12 02 (20 01))
    (
        "class",
        Class("Point", (("x", Int(1)),)),
        b"\x3a\x10\x0a\x05Point\x12\x07\x0a\x01x\x12\x02\x20\x01",
    ),
    ("class no name no fields", Class("", ()), b"\x3a\x00"),
    ("enum", Enum("Color", "RED"), b"\x42\x0c\x0a\x05Color\x12\x03RED"),
    ("enum empty variant", Enum("Color", ""), b"\x42\x07\x0a\x05Color"),
    (
        "media",
        Media(MediaKind.IMAGE, "image/png", "url", "u"),
        b"\x8a\x01\x10\x08\x01\x12\x09image/png\x1a\x01u",
    ),
    (
        "media base64",
        Media(MediaKind.PDF, None, "base64", "QQ=="),
        b"\x8a\x01\x08\x08\x03\x22\x04QQ==",
    ),
    ("media file", Media(MediaKind.UNSPECIFIED, "", "file", "f"), b"\x8a\x01\x05\x12\x00\x2a\x01f"),
    ("media empty", Media(MediaKind.UNSPECIFIED, None, None, ""), b"\x8a\x01\x00"),
    (
        "omitted reason: message",
        Omitted("redacted: pii"),
        b"\x3a\x41\x0a\x17"
        + NAME
        + b"\x12\x14\x0a\x06reason\x12\x0a\x1a\x08redacted"
        + b"\x12\x10\x0a\x07message\x12\x05\x1a\x03pii",
    ),
    (
        "omitted reason only",
        Omitted("cycle"),
        b"\x3a\x2c\x0a\x17" + NAME + b"\x12\x11\x0a\x06reason\x12\x07\x1a\x05cycle",
    ),
]


@pytest.mark.parametrize(("value", "body"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_golden_encode(value: Value, body: bytes) -> None:
    assert encode_value(value) == body


@pytest.mark.parametrize(("value", "body"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_golden_decode(value: Value, body: bytes) -> None:
    decoded = decode_value(body)
    if isinstance(value, Int) and not -(2**63) <= value.value < 2**63:
        assert decoded == BigInt(str(value.value))
    else:
        assert decoded == value


def test_float_is_little_endian_fixed64() -> None:
    assert encode_value(Float(1.5)) == b"\x29" + struct.pack("<d", 1.5)


def test_long_lengths_use_multibyte_varints() -> None:
    text = "x" * 300
    assert encode_value(String(text)) == b"\x1a\xac\x02" + text.encode()
    body = encode_value(List((String(text),)))
    # item = 12 ‖ varint(303) ‖ (1a ac 02 ‖ 300 bytes): 1 + 2 + 303 = 306 = varint b2 02
    assert body[:6] == b"\x5a\xb2\x02\x12\xaf\x02"
    assert decode_value(body) == List((String(text),))


def test_encoding_is_deterministic() -> None:
    value = Map((("k", List((Float(0.1), String("é")))), ("j", Class("C", (("f", NULL),)))))
    assert encode_value(value) == encode_value(value)


def test_lone_surrogate_is_written_as_question_mark() -> None:
    assert encode_value(String("a\ud800b")) == b"\x1a\x03a?b"


NOT_VALUES = [
    42,
    List((42,)),  # type: ignore[arg-type]
    Map((("k", "v"),)),  # type: ignore[arg-type]
    Int("x"),  # type: ignore[arg-type]
    Media(MediaKind.PDF, None, "ftp", ""),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("bad", NOT_VALUES)
def test_encoding_a_non_value_is_an_encode_error(bad: object) -> None:
    with pytest.raises(EncodeError):
        encode_value(bad)  # type: ignore[arg-type]


def test_bigint_model_rejects_non_decimal() -> None:
    with pytest.raises(ValueError, match="decimal"):
        BigInt("0x10")
