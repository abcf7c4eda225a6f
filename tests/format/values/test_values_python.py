"""from_python for every supported type, and encode_python == encode_value(from_python(...))."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import pathlib
import re
import uuid
from typing import Any, ClassVar, NamedTuple

import pydantic
import pytest
from hypothesis import given, settings
from value_strategies import Color, Point, python_objects

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
    decode_value,
    encode_python,
    encode_value,
    from_python,
)


def same_bytes(obj: Any) -> Value:
    """from_python(obj), after checking that the direct encoder writes the same bytes."""
    value = from_python(obj)
    assert encode_python(obj) == encode_value(value)
    return value


class Size(enum.IntEnum):
    S = 1


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass
class Base:
    a: int
    kind: ClassVar[str] = "not a field"


@dataclasses.dataclass
class Derived(Base):
    b: str = "x"
    c: list[int] = dataclasses.field(default_factory=list)


class LineItem(pydantic.BaseModel):
    sku: str
    qty: int


class Invoice(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    id: str
    items: list[LineItem]
    status: Color | None = None


class Pair(NamedTuple):
    left: int
    right: str


class Plain:
    def __init__(self) -> None:
        self.visible = 1
        self._hidden = 2


class Slotted:
    __slots__ = ("x",)

    def __repr__(self) -> str:
        return "Slotted()"


class Index:
    def __index__(self) -> int:
        return 7


def stable_id(value: object) -> str:
    """A test id that every process spells alike (pytest-xdist compares the collections): no
    memory addresses, and a set's members in sorted order (string hashes are randomised)."""
    if isinstance(value, set | frozenset):
        text = "{" + ", ".join(sorted(map(repr, value))) + "}"
    else:
        text = repr(value)
    return re.sub(r" at 0x[0-9a-f]+", "", text)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (None, NULL),
        (True, Bool(True)),
        (False, Bool(False)),
        (0, Int(0)),
        (-(2**63), Int(-(2**63))),
        (2**63, BigInt(str(2**63))),
        (-(2**63) - 1, BigInt(str(-(2**63) - 1))),
        (1.5, Float(1.5)),
        ("hé", String("hé")),
        (b"\x00", Bytes(b"\x00")),
        (bytearray(b"ab"), Bytes(b"ab")),
        (memoryview(b"abcd")[::2], Bytes(b"ac")),
        ([1, "a"], List((Int(1), String("a")))),
        ((1, None), List((Int(1), NULL))),
        (collections.deque([1]), List((Int(1),))),
        ({"b", "a", "c"}, List((String("a"), String("b"), String("c")))),
        (frozenset({3, 1, 2}), List((Int(1), Int(2), Int(3)))),
        (
            {"k": 1, 2: "v", None: True},
            Map((("k", Int(1)), ("2", String("v")), ("None", Bool(True)))),
        ),
        (collections.OrderedDict(z=1), Map((("z", Int(1)),))),
        (Color.RED, Enum("Color", "RED")),
        (Size.S, Enum("Size", "S")),
        (Mode.FAST, Enum("Mode", "FAST")),
        ({Color.RED: 1}, Map((("Color.RED", Int(1)),))),
        (Point(1, "y"), Class("Point", (("x", Int(1)), ("y", String("y"))))),
        (Derived(1), Class("Derived", (("a", Int(1)), ("b", String("x")), ("c", List(()))))),
        (Pair(1, "r"), Class("Pair", (("left", Int(1)), ("right", String("r"))))),
        (Plain(), Class("Plain", (("visible", Int(1)),))),
        (datetime.date(2024, 5, 1), String("2024-05-01")),
        (datetime.datetime(2024, 5, 1, 12, 30), String("2024-05-01T12:30:00")),
        (datetime.time(9, 5), String("09:05:00")),
        (uuid.UUID(int=1), String("00000000-0000-0000-0000-000000000001")),
        (decimal.Decimal("1.10"), String("1.10")),
        (pathlib.PurePosixPath("/a/b"), String("/a/b")),
        (Slotted(), String("Slotted()")),
        (Index(), Int(7)),
        (len, String("<built-in function len>")),
        (int, String("<class 'int'>")),
    ],
    ids=lambda value: stable_id(value),
)
def test_from_python(obj: Any, expected: Value) -> None:
    assert same_bytes(obj) == expected


def test_pydantic_model_fields_in_declaration_order_then_extras() -> None:
    invoice = Invoice.model_validate(
        {"id": "i1", "items": [{"sku": "s", "qty": 2}], "status": Color.GREEN, "note": "x"}
    )
    assert same_bytes(invoice) == Class(
        "Invoice",
        (
            ("id", String("i1")),
            ("items", List((Class("LineItem", (("sku", String("s")), ("qty", Int(2)))),))),
            ("status", Enum("Color", "GREEN")),
            ("note", String("x")),
        ),
    )


def test_local_class_name_is_qualname() -> None:
    @dataclasses.dataclass
    class Local:
        v: int

    value = same_bytes(Local(1))
    assert isinstance(value, Class)
    assert value.name == "test_local_class_name_is_qualname.<locals>.Local"


def test_generators_are_not_consumed() -> None:
    gen = (i for i in range(3))
    value = same_bytes(gen)
    assert isinstance(value, String) and value.value.startswith("<generator object")
    assert list(gen) == [0, 1, 2]


def test_cycles_become_omitted() -> None:
    items: list[Any] = [1]
    items.append(items)
    assert same_bytes(items) == List((Int(1), Omitted("cycle: a list that contains itself")))
    node = Point(1, None)
    node.y = {"back": node}
    assert same_bytes(node) == Class(
        "Point",
        (("x", Int(1)), ("y", Map((("back", Omitted("cycle: a Point that contains itself")),)))),
    )


def test_shared_references_are_not_cycles_and_do_not_blow_up() -> None:
    shared = [1]
    assert same_bytes([shared, shared]) == List((List((Int(1),)), List((Int(1),))))
    d: dict[str, Any] = {}
    d["a"] = d
    d["b"] = d
    value = same_bytes(d)
    assert isinstance(value, Map) and len(value.entries) == 2


def test_depth_cap() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    value = same_bytes(deep)
    for _ in range(65):  # depths 0..64 are kept
        assert isinstance(value, List)
        value = value.items[0]
    assert value == Omitted("depth_limit: nested deeper than 64")
    assert from_python([[1]], max_depth=1) == List((List((Int(1),)),))
    assert from_python([[[1]]], max_depth=1) == List(
        (List((Omitted("depth_limit: nested deeper than 1"),)),)
    )
    assert decode_value(encode_python(deep)) == from_python(deep)  # decodes with the default cap


class Exploding:
    __slots__ = ()  # no __dict__, so the repr rule applies

    def __repr__(self) -> str:
        raise ValueError("no repr")


@dataclasses.dataclass
class BadField:
    ok: int

    def __getattribute__(self, name: str) -> Any:
        if name == "ok":
            raise KeyError(name)
        return object.__getattribute__(self, name)


class BadKey:
    def __str__(self) -> str:
        raise TypeError("no str")

    def __repr__(self) -> str:
        return "BadKey()"

    def __hash__(self) -> int:
        return 1


class BadMapping(collections.abc.Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        raise LookupError(key)

    def __iter__(self) -> Any:
        raise OSError("gone")

    def __len__(self) -> int:
        return 1


def test_user_code_errors_become_omitted() -> None:
    assert same_bytes(Exploding()) == Omitted("error: ValueError while capturing Exploding")
    assert same_bytes([BadField(1)]) == List((Omitted("error: KeyError while capturing BadField"),))
    assert same_bytes({BadKey(): 1}) == Map((("BadKey()", Int(1)),))
    assert same_bytes({"m": BadMapping()}) == Map(
        (("m", Omitted("error: OSError while capturing BadMapping")),)
    )


def test_set_of_unrepresentable_elements_is_omitted() -> None:
    assert same_bytes({Exploding()}) == Omitted("error: ValueError while capturing set")


def test_int_too_long_for_decimal_is_omitted() -> None:
    assert same_bytes(10**5000) == Omitted("error: ValueError while capturing int")


def test_lone_surrogates_encode_as_question_marks() -> None:
    assert decode_value(encode_python({"k\udc80": "v\ud800"})) == Map((("k?", String("v?")),))


def test_sets_are_deterministic_across_insertion_orders() -> None:
    a = {"pear", "apple", "fig", "kiwi"}
    b = set(reversed(sorted(a)))
    assert encode_python(a) == encode_python(b)


def test_dict_insertion_order_is_kept() -> None:
    assert encode_python({"a": 1, "b": 2}) != encode_python({"b": 2, "a": 1})


@settings(max_examples=400)
@given(python_objects)
def test_direct_encoder_matches_model_encoder(obj: Any) -> None:
    body = encode_python(obj)
    assert body == encode_value(from_python(obj))
    decode_value(body)


def test_properties_are_not_evaluated_for_plain_objects() -> None:
    class Lazy:
        def __init__(self) -> None:
            self.x = 1

        @property
        def boom(self) -> int:
            raise RuntimeError("never read")

    assert same_bytes(Lazy()) == Class(Lazy.__qualname__, (("x", Int(1)),))


def test_colour_and_point_strategies_are_used() -> None:
    assert same_bytes([Color.GREEN, Point(Color.RED, {1, 2})]) == List(
        (
            Enum("Color", "GREEN"),
            Class("Point", (("x", Enum("Color", "RED")), ("y", List((Int(1), Int(2)))))),
        )
    )
