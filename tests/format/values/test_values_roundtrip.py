"""Hypothesis round trips of codec-1 bodies and the semantic equality rules."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from value_strategies import values

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
    values_equal,
)


def identical(a: Value, b: Value) -> bool:
    """Structural identity where floats compare by bit pattern (so NaN is NaN, -0.0 is not 0.0)."""
    if isinstance(a, Float) and isinstance(b, Float):
        return struct.pack("<d", a.value) == struct.pack("<d", b.value)
    if isinstance(a, List) and isinstance(b, List):
        return len(a.items) == len(b.items) and all(map(identical, a.items, b.items))
    if isinstance(a, Map) and isinstance(b, Map):
        return _same_entries(a.entries, b.entries)
    if isinstance(a, Class) and isinstance(b, Class):
        return a.name == b.name and _same_entries(a.fields, b.fields)
    return type(a) is type(b) and a == b


def _same_entries(xs: tuple[tuple[str, Value], ...], ys: tuple[tuple[str, Value], ...]) -> bool:
    return len(xs) == len(ys) and all(
        kx == ky and identical(vx, vy) for (kx, vx), (ky, vy) in zip(xs, ys, strict=True)
    )


@settings(max_examples=400)
@given(values)
def test_encode_decode_round_trip(value: Value) -> None:
    body = encode_value(value)
    decoded = decode_value(body)
    assert identical(decoded, value)
    assert values_equal(decoded, value)
    assert encode_value(decoded) == body


@settings(max_examples=200)
@given(values)
def test_values_equal_is_reflexive(value: Value) -> None:
    assert values_equal(value, value)


def test_int_beyond_i64_decodes_as_equal_bigint() -> None:
    for n in (2**63, -(2**63) - 1, 10**40, -(10**40)):
        decoded = decode_value(encode_value(Int(n)))
        assert decoded == BigInt(str(n))
        assert values_equal(decoded, Int(n))


NAN = float("nan")


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (Float(NAN), Float(-NAN), True),
        (Float(NAN), Float(0.0), False),
        (Float(0.0), Float(-0.0), False),
        (Float(-0.0), Float(-0.0), True),
        (Int(0), Float(0.0), True),
        (Int(0), Float(-0.0), False),
        (Int(1), Float(1.0), True),
        (Int(2**53 + 1), Float(2.0**53), False),  # no float rounding of the int
        (BigInt(str(2**80)), Float(2.0**80), True),
        (BigInt(str(2**80 + 1)), Float(2.0**80), False),
        (BigInt("5"), Int(5), True),
        (Int(1), Float(math.inf), False),
        (Float(math.inf), Float(math.inf), True),
        (Bool(True), Int(1), False),
        (Bool(False), Bool(False), True),
        (NULL, NULL, True),
        (NULL, Omitted("x"), False),
        (Omitted("x"), Omitted("x"), True),
        (Omitted("x"), Omitted("y"), False),
        (String("a"), Bytes(b"a"), False),
        (Map((("a", Int(1)), ("b", Int(2)))), Map((("b", Int(2)), ("a", Int(1)))), True),
        (Map((("a", Int(1)),)), Map((("a", Int(1)), ("b", Int(2)))), False),
        (Map((("a", Int(1)),)), Map((("a", Float(1.0)),)), True),
        (Class("P", (("x", Int(1)), ("y", NULL))), Class("P", (("y", NULL), ("x", Int(1)))), True),
        (Class("P", (("x", Int(1)),)), Class("Q", (("x", Int(1)),)), False),
        (Class("P", (("x", Int(1)),)), Map((("x", Int(1)),)), True),  # a JSON literal
        (Map((("x", Int(1)),)), Class("P", (("x", Int(2)),)), False),
        (List((Int(1), Int(2))), List((Int(2), Int(1))), False),
        (List((Float(NAN),)), List((Float(NAN),)), True),
        (List(()), Map(()), False),
        (Enum("Color", "RED"), String("RED"), True),
        (String("RED"), Enum("Color", "RED"), True),
        (Enum("Color", "RED"), Enum("Shade", "RED"), False),
        (Media(MediaKind.IMAGE, None, "url", "u"), Media(MediaKind.IMAGE, None, "url", "u"), True),
        (
            Media(MediaKind.IMAGE, None, "url", "u"),
            Media(MediaKind.IMAGE, None, "file", "u"),
            False,
        ),
    ],
)
def test_values_equal_rules(a: Value, b: Value, equal: bool) -> None:
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal
