"""The value index answers a superset: for seeded random values and predicates, every value the
query engine's own semantics would match (or count unavailable through an omission) is among
the CIDs :func:`matching_cids` returns from ``value_paths_v1``; and the parser recognises only
the predicate shapes it can answer."""

from __future__ import annotations

import random

import pytest

from baml_studio.coordinator.value_index import ValuePredicate, matching_cids, value_predicate
from baml_studio.format.ids import value_cid, value_cid_wire
from baml_studio.format.values import (
    Bool,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Null,
    Omitted,
    String,
    Value,
    encode_value,
)
from baml_studio.projector.lance_store import VALUE_PATHS, PrivateStore
from baml_studio.query.gatekeeper import admit
from baml_studio.query.semantics import OmittedAt, compare, navigate, render_text

KEYS = ["a", "b", "priority", "x.y", "note"]
WORDS = ["refund", "login", "high", "low", "Refund", "12"]


def _scalar(rng: random.Random) -> Value:
    pick = rng.randrange(10)
    if pick == 0:
        return Int(rng.randrange(-50, 50))
    if pick == 1:
        return Float(rng.choice([0.5, -2.0, 30.0, float("nan"), 1e300]))
    if pick == 2:
        return Bool(rng.random() < 0.5)
    if pick == 3:
        return Null()
    if pick == 4:
        return Enum("Level", rng.choice(["high", "low", "HIGH"]))
    if pick == 5:
        return Omitted("too_large")
    if pick == 6:
        return Int(2**60 + rng.randrange(5))
    if pick == 7:
        return String("x" * 5000 + rng.choice(WORDS))  # kept as a prefix in the index
    return String(" ".join(rng.choice([*WORDS, "the", "and"]) for _ in range(rng.randrange(4))))


def _value(rng: random.Random, depth: int = 0) -> Value:
    if depth >= 3 or rng.random() < 0.3:
        return _scalar(rng)
    if rng.random() < 0.2:
        return List(tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3))))
    entries = tuple((rng.choice(KEYS), _value(rng, depth + 1)) for _ in range(rng.randrange(4)))
    if rng.random() < 0.3:
        return Class("C", entries)
    return Map(entries)


def _literal(rng: random.Random) -> str | int | float:
    return rng.choice(["high", "low", "refund", "the and", "", 0, 30, -2, 0.5, 12])


PATHS = [("a",), ("b",), ("a", "b"), ("priority",), ("x.y",), ("a", "note"), ("note",)]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[PrivateStore, dict[str, Value]]:
    rng = random.Random(20261201)
    values: dict[str, Value] = {}
    for _ in range(400):
        value = _value(rng)
        body = encode_value(value)
        values[value_cid_wire(value_cid(1, body))] = value
    store = PrivateStore(str(tmp_path_factory.mktemp("index") / "derived"))
    entries = [(cid, 1, encode_value(v), "pack:test") for cid, v in values.items()]
    corrupt = b"\xff\x00 not a value"
    entries.append((value_cid_wire(value_cid(1, corrupt)), 1, corrupt, "pack:test"))
    store.ingest_values(entries)
    return store, values


def _scan(store: PrivateStore):  # type: ignore[no-untyped-def]
    dataset = store.open_dataset(VALUE_PATHS)
    assert dataset is not None
    return lambda columns, where: dataset.to_table(columns=columns, filter=where)


def _path_text(path: tuple[str, ...]) -> str:
    from baml_studio.projector.value_paths import key_step

    return "$" + "".join(key_step(k) for k in path)


def _literal_value(literal: str | int | float) -> Value:
    if isinstance(literal, str):
        return String(literal)
    return Int(literal) if isinstance(literal, int) else Float(literal)


def test_comparisons_return_a_superset_of_the_engines_matches(
    indexed: tuple[PrivateStore, dict[str, Value]],
) -> None:
    store, values = indexed
    rng = random.Random(7)
    scan = _scan(store)
    checked = pruned = 0
    for _ in range(120):
        path = rng.choice(PATHS)
        op = rng.choice(["=", "<>", "<", "<=", ">", ">="])
        literal = _literal(rng)
        found = matching_cids(
            ValuePredicate("calls_v1", "args", _path_text(path), op, literal), scan
        )
        for cid, value in values.items():
            try:
                match = compare(op, navigate(value, path), _literal_value(literal))
            except OmittedAt:
                match = True  # counted unavailable by the engine: must not be dropped
            if match:
                assert cid in found, (path, op, literal, value)
                checked += 1
            elif cid not in found:
                pruned += 1
    assert checked > 50 and pruned > 1000  # the index decided something, both ways


def test_substring_search_returns_a_superset_of_the_engines_matches(
    indexed: tuple[PrivateStore, dict[str, Value]],
) -> None:
    store, values = indexed
    scan = _scan(store)
    checked = pruned = 0
    for path in PATHS:
        for word in ["refund", "login", "high", "HIGH", "the and", "true", "nan", "30"]:
            found = matching_cids(ValuePredicate("calls_v1", "args", _path_text(path), "like",
                                                 word), scan)  # fmt: skip
            for cid, value in values.items():
                try:
                    text = render_text(navigate(value, path))
                    match = text is not None and word in text
                except OmittedAt:
                    match = True
                if match:
                    assert cid in found, (path, word, value)
                    checked += 1
                elif cid not in found:
                    pruned += 1
    assert checked > 20 and pruned > 1000


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("args['a']['b'] = 'x'", ("args", "$.a.b", "=", "x")),
        ("30 <= args['a']", ("args", "$.a", ">=", 30)),
        ("c.output['x.y'] > -2.5", ("output", '$["x.y"]', ">", -2.5)),
        ("output['note'] LIKE '%refund%'", ("output", "$.note", "like", "refund")),
        ("CAST(output['note'] AS VARCHAR) LIKE '%refund%'", ("output", "$.note", "like", "refund")),
        ("error['m'] <> 'y'", ("error", "$.m", "<>", "y")),
    ],
)
def test_recognised_predicates(where: str, expected: tuple[object, ...]) -> None:
    node = admit(f"SELECT 1 FROM calls c WHERE {where}", internal=False).query
    assert node is not None
    found = value_predicate("calls_v1", node.args["where"].this, lambda col: True)
    assert found is not None
    assert (found.column, found.path, found.op, found.literal) == expected


@pytest.mark.parametrize(
    "where",
    [
        "args['a'][1] = 'x'",  # list index
        "args = 'x'",  # whole value, no path
        "args['a'] = baml_value_json('1')",
        "args['a'] LIKE 'x%'",  # not a %word% search
        "args['a'] LIKE '%a_b%'",  # a wildcard inside
        "output LIKE '%refund%'",  # the whole value renders as JSON
        "args['a'] = fqn",
        "call_site_file = 'x'",
        "args['a'] = 9007199254740993",  # past exact float comparison
    ],
)
def test_unrecognised_predicates(where: str) -> None:
    node = admit(f"SELECT 1 FROM calls WHERE {where}", internal=False).query
    assert node is not None
    assert value_predicate("calls_v1", node.args["where"].this, lambda col: True) is None
