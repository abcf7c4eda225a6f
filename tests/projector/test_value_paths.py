"""value_paths: leaf rows of codec-1 values (golden rows, escaping, caps, fuzz, round-trip)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lance_fixtures import values

from baml_studio.format.cas import CODEC_FUNCTION_TABLE, CODEC_VALUE
from baml_studio.format.errors import ValueCorrupt
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
    Null,
    Omitted,
    String,
    Value,
    encode_value,
    from_json,
)
from baml_studio.format.values.codec import ValueTooDeep
from baml_studio.projector.value_paths import (
    MAX_LEAVES,
    MAX_TEXT_BYTES,
    VALUE_PATHS_SCHEMA,
    key_step,
    leaf_rows,
    paths_table,
)

CID = "bamlv_1_" + "ab" * 32


def rows_of(value: Value | object, **caps: int) -> list[tuple[str, str, str | None, float | None]]:
    v = value if isinstance(value, Value) else from_json(value)  # type: ignore[arg-type]
    return [
        (r["path"], r["kind"], r["str_value"], r["num_value"])
        for r in leaf_rows(CID, CODEC_VALUE, encode_value(v), **caps)
    ]


def test_invoice_golden_rows() -> None:
    value = {
        "invoice": {"id": "INV-1042", "total": 12.5, "paid": True, "note": None},
        "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
        "tags": [],
        "meta": {},
    }
    assert rows_of(value) == [
        ("$.invoice.id", "string", "INV-1042", None),
        ("$.invoice.total", "float", None, 12.5),
        ("$.invoice.paid", "bool", "true", None),
        ("$.invoice.note", "null", None, None),
        ("$.items[0].sku", "string", "A-1", None),
        ("$.items[0].qty", "int", None, 2.0),
        ("$.items[1].sku", "string", "B-2", None),
        ("$.items[1].qty", "int", None, 1.0),
        ("$.tags", "list", "[]", None),
        ("$.meta", "map", "{}", None),
    ]
    rows = leaf_rows(CID, CODEC_VALUE, encode_value(from_json(value)))
    assert {r["cid"] for r in rows} == {CID}
    table = paths_table(rows)
    assert table.schema == VALUE_PATHS_SCHEMA
    assert table.num_rows == 10


def test_scalar_root_is_dollar() -> None:
    assert rows_of(String("hello")) == [("$", "string", "hello", None)]
    assert rows_of(Int(-7)) == [("$", "int", None, -7.0)]
    assert rows_of(NULL) == [("$", "null", None, None)]
    assert rows_of(List(())) == [("$", "list", "[]", None)]
    assert rows_of(Class("Empty", ())) == [("$", "map", "{}", None)]


@pytest.mark.parametrize(
    ("key", "step"),
    [
        ("id", ".id"),
        ("_x9", "._x9"),
        ("a.b", '["a.b"]'),
        ("", '[""]'),
        ("$ref", '["$ref"]'),
        ('say "hi"', '["say \\"hi\\""]'),
        ("it's", '["it\'s"]'),
        ("9lives", '["9lives"]'),
        ("ünï", '["ünï"]'),
        ("a]b[", '["a]b["]'),
        ("tab\t", '["tab\\t"]'),
    ],
)
def test_key_escaping(key: str, step: str) -> None:
    assert key_step(key) == step
    assert rows_of(Map(((key, Int(1)),)))[0][0] == "$" + step


def test_kinds_of_every_scalar() -> None:
    value = Class(
        "Everything",
        (
            ("e", Enum("Color", "RED")),
            ("b", Bytes(b"\x00\xff")),
            ("u", Media(MediaKind.IMAGE, "image/png", "url", "https://x/y.png")),
            ("f", Media(MediaKind.PDF, None, "file", "/tmp/a.pdf")),
            ("d", Media(MediaKind.IMAGE, "image/png", "base64", "AAAA")),
            ("o", Omitted("too_big: 9 MiB")),
            ("no", Bool(False)),
            ("nan", Float(math.nan)),
            ("inf", Float(-math.inf)),
        ),
    )
    rows = rows_of(value)
    assert rows[:7] == [
        ("$.e", "enum", "RED", None),
        ("$.b", "bytes", "00ff", None),
        ("$.u", "media", "https://x/y.png", None),
        ("$.f", "media", "/tmp/a.pdf", None),
        ("$.d", "media", None, None),
        ("$.o", "omitted", "too_big: 9 MiB", None),
        ("$.no", "bool", "false", None),
    ]
    assert rows[7][:3] == ("$.nan", "float", None) and math.isnan(rows[7][3])  # type: ignore[arg-type]
    assert rows[8] == ("$.inf", "float", None, -math.inf)


def test_big_integers_keep_their_exact_text() -> None:
    exact = 1 << 53
    assert rows_of(Int(exact)) == [("$", "int", None, float(exact))]
    assert rows_of(Int(-exact - 1)) == [("$", "int", str(-exact - 1), float(-exact - 1))]
    huge = "9" * 400
    assert rows_of(BigInt(huge)) == [("$", "int", huge, None)]


def test_repeated_key_keeps_last_value_at_first_position() -> None:
    value = Map((("a", Int(1)), ("b", Int(2)), ("a", Int(3))))
    assert rows_of(value) == [("$.a", "int", None, 3.0), ("$.b", "int", None, 2.0)]


def test_long_text_keeps_a_marked_prefix() -> None:
    text = "é" * 3000  # 6000 UTF-8 bytes
    ((path, kind, kept, _),) = rows_of(String(text))
    assert (path, kind) == ("$", "string_prefix")
    assert kept is not None and text.startswith(kept)
    assert len(kept.encode()) == MAX_TEXT_BYTES  # 2048 two-byte characters fit exactly
    ((_, kind, kept, _),) = rows_of(String("x" * 10 + "€"), max_text_bytes=12)
    assert (kind, kept) == ("string_prefix", "x" * 10)  # the 3-byte € does not fit
    fits = "a" * MAX_TEXT_BYTES
    assert rows_of(String(fits)) == [("$", "string", fits, None)]
    assert rows_of(Enum("E", "v" * 5000))[0][1] == "enum_prefix"


def test_leaf_cap_adds_a_truncated_row() -> None:
    value = List(tuple(Int(i) for i in range(12)))
    rows = rows_of(value, max_leaves=10)
    assert [r[0] for r in rows[:10]] == [f"$[{i}]" for i in range(10)]
    assert rows[10] == ("$", "truncated", None, 12.0)
    default = rows_of(List(tuple(Int(i) for i in range(MAX_LEAVES + 1))))
    assert len(default) == MAX_LEAVES + 1 and default[-1][1] == "truncated"
    assert len(rows_of(List(tuple(Int(i) for i in range(MAX_LEAVES))))) == MAX_LEAVES


def test_other_codecs_give_no_rows() -> None:
    assert leaf_rows(CID, CODEC_FUNCTION_TABLE, b"\xff\x00 not a value") == []
    assert leaf_rows(CID, 77, encode_value(String("x"))) == []


def test_corrupt_and_too_deep_bodies_raise_typed_errors() -> None:
    with pytest.raises(ValueCorrupt):
        leaf_rows(CID, CODEC_VALUE, b"\x1a\x05ab")  # string runs past the end
    deep: Value = Int(1)
    for _ in range(150):
        deep = List((deep,))
    with pytest.raises(ValueTooDeep):
        leaf_rows(CID, CODEC_VALUE, encode_value(deep))
    with pytest.raises(ValueError, match="max_leaves"):
        leaf_rows(CID, CODEC_VALUE, b"", max_leaves=0)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_fuzz_random_bodies_give_rows_or_value_corrupt(body: bytes) -> None:
    try:
        rows = leaf_rows(CID, CODEC_VALUE, body)
    except ValueCorrupt:
        return
    assert rows  # every decodable value has at least one leaf
    assert len({r["path"] for r in rows}) == len(rows)
    paths_table(rows)  # every row fits the dataset schema


# --- round trip: every leaf of a value appears once, at a path that leads to it -----------

_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(0|[1-9][0-9]*)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_path(path: str) -> list[str | int]:
    assert path.startswith("$")
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _STEP.match(path, pos)
        assert m is not None, f"bad path {path!r} at {pos}"
        name, index, quoted = m.groups()
        steps.append(
            name if name is not None else int(index) if index is not None else json.loads(quoted)
        )
        pos = m.end()
    return steps


def children(node: Value) -> dict[str | int, Value] | None:
    if isinstance(node, List):
        return dict(enumerate(node.items))
    if isinstance(node, Map | Class):
        return dict(node.entries if isinstance(node, Map) else node.fields)
    return None


def leaf_count(node: Value) -> int:
    kids = children(node)
    return 1 if not kids else sum(leaf_count(k) for k in kids.values())


KINDS = {
    Null: "null", Bool: "bool", Int: "int", BigInt: "int", Float: "float", String: "string",
    Enum: "enum", Bytes: "bytes", Media: "media", Omitted: "omitted", List: "list", Map: "map",
    Class: "map",
}  # fmt: skip


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_every_leaf_appears_at_its_path(value: Value) -> None:
    rows = leaf_rows(CID, CODEC_VALUE, encode_value(value))
    assert len(rows) == leaf_count(value)
    assert len({r["path"] for r in rows}) == len(rows)
    for row in rows:
        node = value
        for step in parse_path(row["path"]):
            kids = children(node)
            assert kids is not None and step in kids
            node = kids[step]
        assert not children(node)
        assert row["kind"] == KINDS[type(node)]
        if isinstance(node, String):
            assert row["str_value"] == node.value
        if isinstance(node, Int) and abs(node.value) <= 1 << 53:
            assert row["num_value"] == node.value
