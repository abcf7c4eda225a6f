"""Pure value semantics (navigation, comparison, rendering, sort keys) and the resolver's cache."""

from __future__ import annotations

import math

import pytest
from query_fakes import E1, FakeSource

from baml_studio.catalog.handles import Available, encode_handle
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
    Omitted,
    String,
    Value,
    encode_value,
)
from baml_studio.query import QueryBudgets, QueryEngine
from baml_studio.query.semantics import (
    OmittedAt,
    compare,
    navigate,
    render_json,
    render_text,
    sort_key,
)
from baml_studio.query.values import CACHE_ENTRIES, ValueResolver

DOC = Map(
    (
        ("a", Int(1)),
        ("a", Int(2)),  # a repeated key: the last one wins, as in to_json
        ("items", List((String("x"), String("y"), String("z")))),
        ("obj", Class("C", (("f", Bool(True)),))),
        ("gone", Omitted("too big")),
    )
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ((), DOC),
        (("a",), Int(2)),
        (("items", 0), String("x")),
        (("items", -1), String("z")),
        (("items", 3), None),
        (("items", -4), None),
        (("items", "0"), None),
        (("obj", "f"), Bool(True)),
        (("obj", 0), None),
        (("missing", "x"), None),
        (("a", "deeper"), None),
    ],
)
def test_navigate(path: tuple[str | int, ...], expected: Value | None) -> None:
    assert navigate(DOC, path) == expected


def test_navigate_through_omitted_is_unavailable() -> None:
    with pytest.raises(OmittedAt):
        navigate(DOC, ("gone",))
    with pytest.raises(OmittedAt):
        navigate(DOC, ("gone", "x"))


@pytest.mark.parametrize(
    ("op", "left", "right", "expected"),
    [
        ("=", Int(30), Float(30.0), True),
        ("=", Float(-0.0), Int(0), False),
        ("<", Int(2), Float(2.5), True),
        (">=", BigInt("99999999999999999999"), Int(1), True),
        ("=", BigInt("9007199254740993"), Float(9007199254740992.0), False),
        ("=", String("GOLD"), Enum("Tier", "GOLD"), True),
        ("<", String("a"), String("b"), True),
        ("<", Bool(False), Bool(True), True),
        ("=", Bool(True), Int(1), None),
        ("=", String("30"), Int(30), None),
        ("<", Float(math.nan), Int(1), None),
        ("=", Float(math.nan), Float(math.nan), True),
        ("=", NULL, NULL, None),
        ("=", None, Int(1), None),
        ("=", Map((("a", Int(1)),)), Class("X", (("a", Float(1.0)),)), True),
        ("<", Map(()), Map(()), None),
        ("<>", List((Int(1),)), List((Int(2),)), True),
        ("=", Bytes(b"a"), Bytes(b"a"), None),
    ],
)
def test_compare(op: str, left: Value | None, right: Value | None, expected: bool | None) -> None:
    assert compare(op, left, right) is expected


def test_render() -> None:
    assert render_text(String("hi")) == "hi"
    assert render_text(Enum("T", "GOLD")) == "GOLD"
    assert render_text(Int(3)) == "3"
    assert render_text(BigInt("123456789012345678901234567890")) == "123456789012345678901234567890"
    assert render_text(Float(0.5)) == "0.5"
    assert render_text(Bool(True)) == "true"
    assert render_text(NULL) is None
    assert render_text(List((Int(1), String("a")))) == '[1,"a"]'
    assert render_text(Bytes(b"\x00")) == '{"$bytes":"00"}'
    assert render_json(String("hi")) == '"hi"'
    assert render_json(None) is None


def test_sort_keys_order_values() -> None:
    ordered = [
        Bool(False),
        Bool(True),
        Float(-math.inf),
        BigInt("-99999999999999999999999"),
        Int(-5),
        Float(-0.0),
        Int(0),
        Float(0.25),
        Int(1),
        Int(10),
        Float(1e300),
        String(""),
        String("B"),
        Enum("E", "a"),
        String("é"),
        List(()),
    ]
    keys = [sort_key(v) for v in ordered]
    assert all(k is not None for k in keys)
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert sort_key(NULL) is None


def _resolver(source: FakeSource, **budgets: int) -> ValueResolver:
    return ValueResolver(source, QueryBudgets(**budgets), deadline=math.inf)


def test_resolver_lru_bounds_and_counts() -> None:
    source = FakeSource()
    handles = [source.value(i)[0] for i in range(CACHE_ENTRIES + 10)]
    resolver = _resolver(source)
    for h in handles:
        resolver.evaluate(h)
    assert resolver.evaluate(handles[-1]) == Int(CACHE_ENTRIES + 9)
    assert len(source.reads) == len(handles)  # the last one was cached
    resolver.evaluate(handles[0])  # evicted: read again
    assert len(source.reads) == len(handles) + 1
    assert resolver.evaluations.available == len(handles) + 2
    assert resolver.evaluate(None) is None
    assert resolver.evaluations.attempted == len(handles) + 2


def test_resolver_too_deep_is_truncated() -> None:
    value: Value = Int(1)
    for _ in range(150):
        value = List((value,))
    source = FakeSource()
    handle, _ = source.body(encode_value(value))
    resolver = _resolver(source)
    assert resolver.evaluate(handle) is None
    assert resolver.evaluations.by_reason == {"truncated": 1}


def test_omitted_value_in_a_query_is_unavailable() -> None:
    source = FakeSource()
    source.call(E1, "omitted", args=Map((("x", Omitted("capture failed")),)))
    source.call(E1, "fine", args=Map((("x", Int(1)),)))
    result = QueryEngine(source).execute("SELECT call_id FROM calls WHERE args['x'] = 1")
    assert [r["call_id"] for r in result] == ["fine"]
    assert result.outcome()["valueEvaluations"]["byReason"] == {"omitted": 1}


def test_handle_of_an_unknown_codec_reads_nothing() -> None:
    source = FakeSource()
    handle = encode_handle(Available(9, b"\x01" * 32))
    resolver = _resolver(source)
    assert resolver.evaluate(handle) is None
    assert source.reads == []
    assert resolver.evaluations.by_reason == {"unsupported": 1}
