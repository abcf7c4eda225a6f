"""Result batches to JSON-able rows (the NDJSON / ``--format json`` row shape).

* timestamps: RFC 3339 in UTC with nanoseconds (``2026-09-10T12:00:00.123456789Z``);
* lists as arrays, structs as objects;
* binary as ``0x…`` hex, except value handles (a virtual column passed through to the output,
  e.g. by ``SELECT *``), which are hydrated and rendered like any projected value;
* value columns the rewriter rendered (``__baml_render_json``) as JSON values: objects, arrays,
  numbers and strings, not JSON text;
* non-finite floats as the strings ``NaN``, ``Infinity``, ``-Infinity``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from baml_studio.format.values import to_json
from baml_studio.query.values import ValueResolver

VIRTUAL_KEY = b"baml.virtual"
_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def unique_names(schema: pa.Schema) -> list[str]:
    """Column names, with repeats suffixed ``_2``, ``_3`` … so a row object keeps them all. A
    suffixed name is never one the query also names (``SELECT a.fqn, b.fqn, x AS fqn_2``: the
    second ``fqn`` became ``fqn_2`` and the row object kept only one of the two)."""
    taken = set(schema.names)
    used: set[str] = set()
    out: list[str] = []
    for name in schema.names:
        candidate, count = name, 1
        while candidate in used or (count > 1 and candidate in taken):
            count += 1
            candidate = f"{name}_{count}"
        used.add(candidate)
        out.append(candidate)
    return out


def is_handle_field(field: pa.Field) -> bool:
    metadata = field.metadata or {}
    return bool(metadata.get(VIRTUAL_KEY) == b"value" and pa.types.is_binary(field.type))


def batch_rows(
    batch: pa.RecordBatch,
    names: Sequence[str],
    value_columns: frozenset[str],
    resolver: ValueResolver,
) -> list[dict[str, Any]]:
    columns = []
    for index, field in enumerate(batch.schema):
        array = batch.column(index)
        if field.name in value_columns and pa.types.is_string(field.type):
            columns.append([_parse_json(x) for x in array.to_pylist()])
        elif is_handle_field(field):
            columns.append([_render_handle(resolver, h) for h in array.to_pylist()])
        else:
            columns.append(column_values(array))
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def column_values(array: pa.Array) -> list[Any]:
    t = array.type
    if pa.types.is_timestamp(t):
        scale = _NS[t.unit]
        ints = array.cast(pa.int64()).to_pylist()
        return [None if n is None else timestamp_text(n * scale) for n in ints]
    return [jsonable(x) for x in array.to_pylist()]


def timestamp_text(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    moment = _EPOCH + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


def _float(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


_CONVERT: list[tuple[type, Callable[[Any], Any]]] = [
    (float, _float),
    (bytes, lambda x: "0x" + x.hex()),
    (dt.datetime, lambda x: x.isoformat()),
    (dt.date, lambda x: x.isoformat()),
    (dt.time, lambda x: x.isoformat()),
    (dt.timedelta, str),
    (decimal.Decimal, lambda x: int(x) if x == x.to_integral_value() else float(x)),
]


def jsonable(x: Any) -> Any:
    """A Python value from ``to_pylist`` as JSON-able data."""
    if x is None or isinstance(x, str | int):  # bool is an int
        return x
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    for kind, convert in _CONVERT:
        if isinstance(x, kind):
            return convert(x)
    return str(x)


def _parse_json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        # plain text a UNION branch projected into a value column, or JSON nested deeper than
        # Python parses: the row keeps the text
        return text


def _render_handle(resolver: ValueResolver, handle: bytes | None) -> Any:
    value = resolver.evaluate(handle)
    return None if value is None else to_json(value)
