"""What value expressions mean: navigation, comparison, rendering and sort keys (§5.4).

Pure functions over the neutral value model. ``None`` is SQL NULL: an absent path, a type
mismatch and a captured ``null`` all compare as NULL (a non-match).

* Subscripts: a string key selects a map entry (the last one if the key repeats) or a class
  field; an integer selects a list item, 0-based, negative from the end (jsonb semantics).
* Comparisons against a literal: numbers (``Int``, ``BigInt``, ``Float``) compare numerically
  and exactly, strings and enum variants as text, booleans ``false < true``; any other pairing
  is a type mismatch. ``=``/``<>`` between two structures (and ``baml_value_json``) use
  :func:`~baml_studio.format.values.values_equal`.
* Rendering: scalars bare (strings unquoted), structures as canonical JSON text.
* Sort keys: (hex of) bytes that order booleans < numbers < strings < everything else (as
  JSON), numbers by value (as float64), strings by code point.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

from baml_studio.format.values import (
    BigInt,
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
    to_json_text,
    values_equal,
)

PathKey = str | int
Path = tuple[PathKey, ...]

OPS = ("=", "<>", "<", "<=", ">", ">=")


class OmittedAt(Exception):
    """Navigation met an ``Omitted`` value: the value is unavailable (``omitted``)."""


def navigate(value: Value, path: Path) -> Value | None:
    """The value at ``path`` (None when absent). Raises :class:`OmittedAt` through an omission."""
    current: Value = value
    for key in path:
        if isinstance(current, Omitted):
            raise OmittedAt(current.reason)
        nxt: Value | None = None
        if isinstance(key, str) and isinstance(current, Map | Class):
            entries = current.entries if isinstance(current, Map) else current.fields
            for name, item in entries:
                if name == key:
                    nxt = item
        elif isinstance(key, int) and isinstance(current, List):
            items = current.items
            index = key + len(items) if key < 0 else key
            nxt = items[index] if 0 <= index < len(items) else None
        if nxt is None:
            return None
        current = nxt
    if isinstance(current, Omitted):
        raise OmittedAt(current.reason)
    return current


def _number(v: Value) -> int | float | None:
    if isinstance(v, Int | Float):
        return v.value
    if isinstance(v, BigInt):
        return int(v.value)
    return None


def _text(v: Value) -> str | None:
    if isinstance(v, String):
        return v.value
    if isinstance(v, Enum):
        return v.variant
    return None


_ORDER: dict[str, Callable[[object, object], bool]] = {
    "<": lambda a, b: a < b,  # type: ignore[operator]  # reason: operands share a kind
    "<=": lambda a, b: a <= b,  # type: ignore[operator]  # reason: operands share a kind
    ">": lambda a, b: a > b,  # type: ignore[operator]  # reason: operands share a kind
    ">=": lambda a, b: a >= b,  # type: ignore[operator]  # reason: operands share a kind
}


def _scalar_pair(a: Value, b: Value) -> tuple[object, object] | None:
    """Both operands as comparable Python scalars of one kind, or None on a type mismatch."""
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na, nb
    ta, tb = _text(a), _text(b)
    if ta is not None and tb is not None:
        return ta, tb
    if isinstance(a, Bool) and isinstance(b, Bool):
        return a.value, b.value
    return None


def compare(op: str, left: Value | None, right: Value | None) -> bool | None:
    """``left <op> right`` for a value against a literal or another value (None = NULL)."""
    if left is None or right is None or isinstance(left, Null) or isinstance(right, Null):
        return None
    pair = _scalar_pair(left, right)
    if pair is None:
        structured = (Map, Class, List)
        if op in ("=", "<>") and isinstance(left, structured) and isinstance(right, structured):
            return values_equal(left, right) == (op == "=")
        return None
    if op in ("=", "<>"):
        return values_equal(left, right) == (op == "=")
    a, b = pair
    if any(isinstance(x, float) and math.isnan(x) for x in pair):
        return None
    return _ORDER[op](a, b)


def equal_json(op: str, left: Value | None, literal: Value) -> bool | None:
    """``left = baml_value_json(…)`` (semantic equality; ``<>`` negates)."""
    if left is None or isinstance(left, Null):
        return None
    return values_equal(left, literal) == (op == "=")


def render_text(v: Value | None) -> str | None:
    """Scalars bare (strings unquoted), structures as canonical JSON; NULL for null/absent."""
    if v is None or isinstance(v, Null):
        return None
    text = _text(v)
    if text is not None:
        return text
    if isinstance(v, Int | BigInt):
        return str(v.value)
    return to_json_text(v)


def render_json(v: Value | None) -> str | None:
    """Canonical JSON text of a value projected to the output (NULL for null/absent)."""
    if v is None or isinstance(v, Null):
        return None
    return to_json_text(v)


_SIGN = 1 << 63


def _as_float(n: int | float) -> float:
    try:
        return float(n)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def sort_key(v: Value | None) -> str | None:
    """Lower-case hex of bytes whose order is the value order described in the module
    docstring (hex keeps the byte order, and Utf8 also sorts inside window frames)."""
    if v is None or isinstance(v, Null):
        return None
    if isinstance(v, Bool):
        key = b"\x01" + bytes([v.value])
    elif (number := _number(v)) is not None:
        x = _as_float(number)
        bits = int.from_bytes(struct.pack(">d", 0.0 if x == 0 else x), "big")
        bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits & _SIGN else bits | _SIGN
        key = b"\x02" + bits.to_bytes(8, "big")
    elif (text := _text(v)) is not None:
        key = b"\x03" + text.encode("utf-8", "surrogatepass")
    else:
        key = b"\x04" + to_json_text(v).encode("utf-8", "surrogatepass")
    return key.hex()
