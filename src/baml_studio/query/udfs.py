"""The internal scalar UDFs the rewriter calls (names start ``__baml_``, so users cannot).

=====================================================  =========================================
``__baml_vcmp(handle, path, op, literal_json)``         value at path ``op`` a SQL literal
``__baml_vcmp_json(handle, path, op, value_json)``      semantic (in)equality with a JSON value
``__baml_vcmp_cid(handle, op, cid)``                    identity of the whole value by CID
``__baml_vcmp_value(handle, path, op, handle, path)``   value against value
``__baml_render(handle, path)``                         Utf8: scalars bare, structures as JSON
``__baml_render_json(handle, path)``                    Utf8: canonical JSON (output columns)
``__baml_sortkey(handle, path)``                        Utf8 ordering key (ORDER BY)
=====================================================  =========================================

``path`` is a JSON array of keys and indexes (``["customer","age"]``); every argument but the
handles and the gate is a literal the rewriter wrote, so it is read once per batch. Predicates
return NULL for non-matches the three-valued rules produce; unavailable values are counted by
the resolver.

Every UDF takes a last Boolean argument, the *gate*: a row whose gate is not TRUE is not
evaluated (NULL, not counted). In a WHERE clause the gate is the clause's other, value-free
conjuncts, so a row those exclude never reads a value nor counts as unavailable, whatever order
DataFusion evaluates the conjunction in. Elsewhere the gate is TRUE.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import ScalarUDF, udf

from baml_studio.format.values import Value, from_json_text
from baml_studio.jsontext import parse_json
from baml_studio.query.errors import InternalQueryError
from baml_studio.query.semantics import (
    Path,
    compare,
    equal_json,
    render_json,
    render_text,
    sort_key,
)
from baml_studio.query.values import ValueResolver

VCMP = "__baml_vcmp"
VCMP_JSON = "__baml_vcmp_json"
VCMP_CID = "__baml_vcmp_cid"
VCMP_VALUE = "__baml_vcmp_value"
RENDER = "__baml_render"
RENDER_JSON = "__baml_render_json"
SORTKEY = "__baml_sortkey"

CID_PREFIX = "bamlv_1_"


@functools.lru_cache(maxsize=256)
def parse_path(text: str) -> Path:
    """The path a ``path_json`` literal writes: a JSON array of keys (strings) and indexes
    (integers). The rewriter writes every path, so other text is a bug: ``InternalQueryError``."""
    keys = parse_json(text, lambda reason: _bad_path(text, reason))
    if not isinstance(keys, list) or not all(_is_path_key(key) for key in keys):
        raise _bad_path(text, "not a JSON array of keys (strings) and indexes (integers)")
    return tuple(keys)


def _is_path_key(key: object) -> bool:
    return isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))


def _bad_path(text: str, reason: str) -> InternalQueryError:
    return InternalQueryError(
        f"value path {text[:80]!r} is unreadable: {reason}", "report this bug"
    )


@functools.lru_cache(maxsize=256)
def _literal(text: str) -> Value:
    return from_json_text(text)


def _const(array: Any) -> str:
    return str(array[0].as_py())


def build_udfs(resolver: ValueResolver) -> list[ScalarUDF]:
    """The UDFs of one query, bound to its resolver."""

    def batch(fn: Callable[..., list[Any]], out: pa.DataType) -> Callable[..., pa.Array]:
        def run(handles: pa.Array, *args: pa.Array) -> pa.Array:
            if len(handles) == 0:
                return pa.array([], out)
            resolver.check_deadline()
            *middle, gates = args
            live = [
                h if g is True else None
                for h, g in zip(handles.to_pylist(), gates.to_pylist(), strict=True)
            ]
            return pa.array(fn(live, *middle), out)

        return run

    def vcmp(handles: list[bytes | None], path: Any, op: Any, lit: Any) -> list[bool | None]:
        p, o, value = parse_path(_const(path)), _const(op), _literal(_const(lit))
        return [compare(o, resolver.evaluate(h, p), value) for h in handles]

    def vcmp_json(handles: list[bytes | None], path: Any, op: Any, lit: Any) -> list[bool | None]:
        p, o, value = parse_path(_const(path)), _const(op), _literal(_const(lit))
        return [equal_json(o, resolver.evaluate(h, p), value) for h in handles]

    def vcmp_cid(handles: list[bytes | None], op: Any, cid: Any) -> list[bool | None]:
        o, want = _const(op), bytes.fromhex(_const(cid).removeprefix(CID_PREFIX))
        out: list[bool | None] = []
        for h in handles:
            got = resolver.cid_of(h)
            out.append(None if got is None else (got == want) == (o == "="))
        return out

    def vcmp_value(
        handles: list[bytes | None], path: Any, op: Any, others: Any, other_path: Any
    ) -> list[bool | None]:
        p, o, q = parse_path(_const(path)), _const(op), parse_path(_const(other_path))
        out: list[bool | None] = []
        for h, r in zip(handles, others.to_pylist(), strict=True):
            left = resolver.evaluate(h, p)
            out.append(None if left is None else compare(o, left, resolver.evaluate(r, q)))
        return out

    def mapper(render: Callable[[Value | None], Any]) -> Callable[..., list[Any]]:
        def run(handles: list[bytes | None], path: Any) -> list[Any]:
            p = parse_path(_const(path))
            return [render(resolver.evaluate(h, p)) for h in handles]

        return run

    b, s, g = pa.binary(), pa.string(), pa.bool_()
    specs: list[tuple[str, Callable[..., list[Any]], list[pa.DataType], pa.DataType]] = [
        (VCMP, vcmp, [b, s, s, s, g], pa.bool_()),
        (VCMP_JSON, vcmp_json, [b, s, s, s, g], pa.bool_()),
        (VCMP_CID, vcmp_cid, [b, s, s, g], pa.bool_()),
        (VCMP_VALUE, vcmp_value, [b, s, s, b, s, g], pa.bool_()),
        (RENDER, mapper(render_text), [b, s, g], s),
        (RENDER_JSON, mapper(render_json), [b, s, g], s),
        (SORTKEY, mapper(sort_key), [b, s, g], s),
    ]
    return [udf(batch(fn, out), ins, out, "immutable", name) for name, fn, ins, out in specs]
