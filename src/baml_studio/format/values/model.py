"""The neutral value model (reference facts §4.3, ``baml_query::value::Value``) and its semantics.

A :data:`Value` is one of thirteen frozen dataclasses. Containers hold tuples, so values are
immutable and hashable (floats hash by Python rules; use :func:`values_equal` to compare).

Semantic equality (:func:`values_equal`, §4.3/§5.4), which is *not* the dataclass ``==``:

* maps and classes compare their entries sorted by key (stable, so duplicate keys compare in
  order); a class also compares its name;
* floats: every NaN equals every NaN; ``+0.0`` and ``-0.0`` are distinct;
* ``Int``, ``BigInt`` and ``Float`` compare numerically and exactly (no float rounding of big
  ints); ``Int(0)`` equals ``Float(0.0)`` but not ``Float(-0.0)``, so equality stays transitive;
* a JSON literal (``baml_value_json('…')``) cannot name a class or an enum type, so a ``Map``
  equals a ``Class`` with the same key-sorted entries (the class name is ignored) and a
  ``String`` equals an ``Enum`` whose variant is that string;
* ``Bool`` never equals a number; ``Omitted`` equals ``Omitted`` with the same reason.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
_DECIMAL = re.compile(r"-?[0-9]+")


class MediaKind(enum.IntEnum):
    """``PbMediaKind``; the lower-case member name is the JSON spelling."""

    UNSPECIFIED = 0
    IMAGE = 1
    AUDIO = 2
    PDF = 3
    VIDEO = 4
    OTHER = 5


MediaSource: TypeAlias = Literal["url", "base64", "file"]
MEDIA_SOURCES: tuple[MediaSource, ...] = ("url", "base64", "file")


@dataclass(frozen=True, slots=True)
class Null:
    pass


@dataclass(frozen=True, slots=True)
class Bool:
    value: bool


@dataclass(frozen=True, slots=True)
class Int:
    """A signed integer. Values outside i64 are legal here and encode as ``bigint``."""

    value: int


@dataclass(frozen=True, slots=True)
class Float:
    value: float


@dataclass(frozen=True, slots=True)
class BigInt:
    """An integer as a decimal string (``-?[0-9]+``), as decoded from the wire's base-16 form."""

    value: str

    def __post_init__(self) -> None:
        if not _DECIMAL.fullmatch(self.value):
            raise ValueError(f"BigInt needs a decimal string like '-123', got {self.value!r}")


@dataclass(frozen=True, slots=True)
class String:
    value: str


@dataclass(frozen=True, slots=True)
class Bytes:
    value: bytes


@dataclass(frozen=True, slots=True)
class List:
    items: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Map:
    """Entries in insertion order; keys may repeat (the wire allows it)."""

    entries: tuple[tuple[str, Value], ...]


@dataclass(frozen=True, slots=True)
class Class:
    name: str
    fields: tuple[tuple[str, Value], ...]


@dataclass(frozen=True, slots=True)
class Enum:
    name: str
    variant: str


@dataclass(frozen=True, slots=True)
class Media:
    """``source`` says which of url/base64/file ``content`` holds; ``None`` if the wire had none."""

    kind: MediaKind
    mime: str | None
    source: MediaSource | None
    content: str


@dataclass(frozen=True, slots=True)
class Omitted:
    """A value the producer did not capture (``baml.trace.OmittedValue``), with its reason."""

    reason: str


Scalar: TypeAlias = Null | Bool | Int | Float | BigInt | String | Bytes | Enum | Media | Omitted
Value: TypeAlias = Scalar | List | Map | Class
NULL = Null()


def values_equal(a: Value, b: Value) -> bool:
    """Semantic equality of two values (see the module docstring for the rules)."""
    if isinstance(a, Float | Int | BigInt) and isinstance(b, Float | Int | BigInt):
        return _numbers_equal(a, b)
    if isinstance(a, Map | Class) and isinstance(b, Map | Class):
        return _entries_equal(a, b)
    if isinstance(a, List) and isinstance(b, List):
        return len(a.items) == len(b.items) and all(
            values_equal(x, y) for x, y in zip(a.items, b.items, strict=True)
        )
    if isinstance(a, String) and isinstance(b, Enum):
        return a.value == b.variant
    if isinstance(a, Enum) and isinstance(b, String):
        return a.variant == b.value
    return type(a) is type(b) and a == b


def _numbers_equal(a: Float | Int | BigInt, b: Float | Int | BigInt) -> bool:
    x = a.value if not isinstance(a, BigInt) else int(a.value)
    y = b.value if not isinstance(b, BigInt) else int(b.value)
    if isinstance(x, float) and isinstance(y, float):
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)
    if isinstance(x, float) or isinstance(y, float):
        f, n = (x, y) if isinstance(x, float) else (y, x)
        if f == 0.0:
            return n == 0 and math.copysign(1.0, f) > 0
        return n == f  # int == float is exact in Python (no rounding of the int)
    return x == y


def _sorted_entries(v: Map | Class) -> list[tuple[str, Value]]:
    entries = v.entries if isinstance(v, Map) else v.fields
    return sorted(entries, key=lambda kv: kv[0])


def _entries_equal(a: Map | Class, b: Map | Class) -> bool:
    if isinstance(a, Class) and isinstance(b, Class) and a.name != b.name:
        return False
    xs, ys = _sorted_entries(a), _sorted_entries(b)
    return len(xs) == len(ys) and all(
        kx == ky and values_equal(vx, vy) for (kx, vx), (ky, vy) in zip(xs, ys, strict=True)
    )
