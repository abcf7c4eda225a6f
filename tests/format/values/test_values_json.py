"""Canonical JSON rendering goldens and from_json (the ``baml_value_json('…')`` inverse)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from value_strategies import values

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
    InvalidValueJson,
    List,
    Map,
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
    from_json,
    from_json_text,
    to_json,
    to_json_text,
    values_equal,
)

GOLDEN: list[tuple[Value, str]] = [
    (NULL, "null"),
    (Bool(True), "true"),
    (Int(-3), "-3"),
    (BigInt(str(2**70)), "1180591620717411303424"),
    (Float(1.5), "1.5"),
    (Float(1.0), "1.0"),
    (Float(-0.0), "-0.0"),
    (Float(0.1), "0.1"),
    (Float(math.nan), '{"$float":"NaN"}'),
    (Float(math.inf), '{"$float":"Infinity"}'),
    (Float(-math.inf), '{"$float":"-Infinity"}'),
    (String('é"\n'), '"é\\"\\n"'),
    (Bytes(b"\x00\xff"), '{"$bytes":"00ff"}'),
    (List((Int(1), NULL)), "[1,null]"),
    (Map((("b", Int(1)), ("a", Int(2)))), '{"b":1,"a":2}'),
    (Map((("$ref", Int(1)), ("$$x", Int(2)))), '{"$$ref":1,"$$$x":2}'),
    (Class("Invoice", (("id", String("i")), ("n", Int(2)))), '{"id":"i","n":2}'),
    (Enum("Color", "RED"), '"RED"'),
    (
        Media(MediaKind.IMAGE, "image/png", "url", "https://x/y.png"),
        '{"$media":{"kind":"image","mime":"image/png","url":"https://x/y.png"}}',
    ),
    (Media(MediaKind.PDF, None, "base64", "QQ=="), '{"$media":{"kind":"pdf","base64":"QQ=="}}'),
    (Media(MediaKind.OTHER, None, None, ""), '{"$media":{"kind":"other"}}'),
    (Omitted("redacted: pii"), '{"$omitted":"redacted: pii"}'),
]


@pytest.mark.parametrize(("value", "text"), GOLDEN, ids=[g[1] for g in GOLDEN])
def test_to_json_text_golden(value: Value, text: str) -> None:
    assert to_json_text(value) == text
    assert json.loads(text) == to_json(value) or isinstance(value, Float)


@pytest.mark.parametrize(("value", "text"), GOLDEN, ids=[g[1] for g in GOLDEN])
def test_from_json_text_inverts_the_golden(value: Value, text: str) -> None:
    assert values_equal(from_json_text(text), value)


def test_from_json_types() -> None:
    assert from_json({"a": [1, 2.0, "s", None, True]}) == Map(
        (("a", List((Int(1), Float(2.0), String("s"), NULL, Bool(True)))),)
    )
    assert from_json(2**63) == BigInt(str(2**63))
    assert from_json(-(2**63)) == Int(-(2**63))
    assert from_json({"$bytes": "ab", "x": 1}) == Map((("$bytes", String("ab")), ("x", Int(1))))
    assert from_json({"$other": 1}) == Map((("$other", Int(1)),))
    assert from_json({"$$bytes": "ab"}) == Map((("$bytes", String("ab")),))
    assert from_json({"$media": {"kind": "video"}}) == Media(MediaKind.VIDEO, None, None, "")


@pytest.mark.parametrize(
    "bad",
    [
        {"$bytes": "abc"},
        {"$bytes": "zz"},
        {"$bytes": 1},
        {"$float": "nan"},
        {"$omitted": None},
        {"$media": "image"},
        {"$media": {"kind": "picture"}},
        {"$media": {"kind": "image", "url": "a", "file": "b"}},
        {"$media": {"kind": "image", "size": 1}},
        {"$media": {"kind": "image", "mime": 1}},
        {1: "non-string key"},
        {1, 2},
        b"bytes",
    ],
    ids=repr,
)
def test_from_json_rejects(bad: object) -> None:
    with pytest.raises(InvalidValueJson):
        from_json(bad)


def test_invalid_json_text() -> None:
    with pytest.raises(InvalidValueJson, match="not valid JSON"):
        from_json_text("{'single': 'quotes'}")
    with pytest.raises(InvalidValueJson):
        from_json_text("[" * 100_000 + "]" * 100_000)
    assert issubclass(InvalidValueJson, EncodeError)


@settings(max_examples=300)
@given(values)
def test_json_round_trip_is_semantically_equal(value: Value) -> None:
    text = to_json_text(value)
    assert to_json_text(from_json_text(text)) == text
    if not _has_duplicate_keys(value):  # a JSON object keeps the last of repeated keys
        assert values_equal(from_json_text(text), value)


def _has_duplicate_keys(value: Value) -> bool:
    if isinstance(value, Map | Class):
        entries = value.entries if isinstance(value, Map) else value.fields
        keys = [k for k, _ in entries]
        return len(set(keys)) < len(keys) or any(_has_duplicate_keys(v) for _, v in entries)
    if isinstance(value, List):
        return any(_has_duplicate_keys(v) for v in value.items)
    return False
