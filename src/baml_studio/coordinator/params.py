"""``$n`` / ``?`` parameters of ``POST /v1/query``, bound as typed literals of the catalog SQL.

The coordinator binds parameters before it plans, so the local engine (which takes no
parameters) sees one complete statement. A parameter never becomes SQL by interpolation: each
becomes one sqlglot literal node and the generator quotes it. Types are those of the resident
API's ``QueryParameter`` (``string``, ``int64``, ``uint64``, ``float64``, ``bool``,
``timestamp``, ``null``, with their aliases).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from baml_studio.apierrors import BadRequest
from baml_studio.control.resident_params import INT64, TIMESTAMP_RANGE, UINT64
from baml_studio.wirenumbers import finite_float

DIALECT = "postgres"
_STRING = {"string", "utf8", "text"}
_INT = {"int64", "integer", "int", "uint64"}
_FLOAT = {"float64", "double", "float"}
_BOOL = {"bool", "boolean"}


def bind(sql: str, parameters: Sequence[tuple[str, Any]]) -> str:
    """``sql`` with every placeholder replaced by its parameter; 400 for a missing, unused or
    ill-typed parameter, or SQL nested too deeply to read. Without parameters the text is
    returned unchanged."""
    if not parameters and "$" not in sql and "?" not in sql:
        return sql
    try:
        return _bind(sql, parameters)
    except RecursionError:  # sqlglot parses and generates recursively
        if not parameters:
            return sql  # the gatekeeper reports it with its own words
        raise BadRequest(
            "the SQL is nested too deeply to read: flatten nested expressions or subqueries",
            code="invalid_sql",
        ) from None


def _bind(sql: str, parameters: Sequence[tuple[str, Any]]) -> str:
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except SqlglotError as exc:
        if not parameters:
            return sql  # the gatekeeper reports the syntax error with its own words
        raise BadRequest(f"the SQL does not parse: {exc}", code="invalid_sql") from exc
    used: set[int] = set()
    order = 0

    def replace(node: exp.Expr) -> exp.Expr:
        nonlocal order
        if isinstance(node, exp.Placeholder):
            if node.this is None:  # a bare ?: positional
                order += 1
                position = order
            else:
                position = _position(str(node.this))
        elif isinstance(node, exp.Parameter):
            position = _position(node.name)
        else:
            return node
        if not 1 <= position <= len(parameters):
            raise BadRequest(
                f"the SQL uses parameter ${position} but {len(parameters)} were given",
                code="invalid_parameter",
            )
        used.add(position)
        return literal(position, *parameters[position - 1])

    bound = tree.transform(replace)
    unused = sorted(set(range(1, len(parameters) + 1)) - used)
    if unused:
        raise BadRequest(f"parameters {unused} are not used by the SQL", code="invalid_parameter")
    return bound.sql(dialect=DIALECT)


def _position(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"parameter {text!r} is not $1, $2 …", code="invalid_parameter") from None


def literal(position: int, kind: str, value: Any) -> exp.Expr:
    name = kind.lower()
    if value is None:
        return exp.Null()
    if name in _STRING and isinstance(value, str):
        return exp.Literal.string(value)
    if name in _INT and isinstance(value, int) and not isinstance(value, bool):
        low, high = UINT64 if name == "uint64" else INT64
        if not low <= value <= high:  # as the resident API: a wider one became a float
            raise _bad(position, kind, value, f" (an integer in [{low}, {high}])")
        return exp.Literal.number(value)
    if name in _FLOAT and isinstance(value, int | float) and not isinstance(value, bool):
        number = finite_float(value)  # None for a JSON integer past the float range too
        if number is None:
            raise _bad(position, kind, value, " (a float64 is finite, within ±1.8e308)")
        return exp.Literal.number(repr(number))
    if name in _BOOL and isinstance(value, bool):
        return exp.true() if value else exp.false()
    if name == "timestamp" and isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _bad(position, kind, value) from None
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        if not TIMESTAMP_RANGE[0] <= moment < TIMESTAMP_RANGE[1]:  # a later one became NULL
            raise _bad(position, kind, value, " (a timestamp between 1900-01-01 and 2262-04-11)")
        moment = moment.replace(tzinfo=None)
        return exp.cast(exp.Literal.string(moment.isoformat(sep=" ")), "TIMESTAMP")
    raise _bad(position, kind, value)


def _bad(position: int, kind: str, value: Any, why: str = "") -> BadRequest:
    return BadRequest(
        f"parameter ${position} of type {kind!r} cannot take {value!r}{why}; types: string, "
        "int64, uint64, float64, bool, timestamp (ISO-8601 text), null",
        code="invalid_parameter",
    )
