"""Query parameters: ``$1``/``?`` placeholders bound as typed ClickHouse literals.

A parameter never becomes SQL text by interpolation: each one becomes one sqlglot literal node
(``CAST(5 AS Int64)``, ``'x'' OR ''1''=''1'``, ``toDateTime64('…', 9, 'UTC')``) and the generator
quotes it. Types (``QueryParameter.type``):

=====================  ===========================  =====================================
type                   value (JSON)                 ClickHouse literal
=====================  ===========================  =====================================
string, utf8           string                       ``'text'``
int64, integer         integer (or decimal string)  ``CAST(n AS Int64)``
uint64                 integer ≥ 0 (or string)      ``CAST(n AS UInt64)``
float64, double        number                       ``CAST(x AS Float64)``
bool, boolean          true / false                 ``TRUE`` / ``FALSE``
timestamp              ISO-8601 text                ``toDateTime64('… UTC', 9, 'UTC')``
null                   null                         ``NULL``
=====================  ===========================  =====================================

A ``null`` value of any other type is a typed NULL (``CAST(NULL AS Nullable(Int64))``).
A timestamp without an offset is UTC; fractions keep up to nine digits (nanoseconds).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlglot import exp
from sqlglot.tokenizer_core import Token, TokenType

from baml_studio.control.resident_errors import InvalidParameter
from baml_studio.wirenumbers import ascii_whole_number, finite_float

DIALECT = "postgres"
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
TIMESTAMP_RANGE = (
    datetime(1900, 1, 1, tzinfo=UTC),
    datetime(2262, 4, 11, tzinfo=UTC),
)
PLACEHOLDER_DIGITS = 20
"""Most digits of a ``$n`` placeholder's number (far beyond any parameter list's length)."""
_INTEGER_TEXT = re.compile(r"[+-]?\d{1,20}")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2})?)?"
)


@dataclass(frozen=True, slots=True)
class QueryParameter:
    """One positional parameter of a resident query (``QueryParameter`` in openapi.yaml)."""

    type: str
    """One of :data:`TYPES`, case-insensitive."""

    value: object
    """The JSON value: a string, number, boolean or null, per :attr:`type`."""


TYPES: dict[str, str] = {
    "string": "String",
    "utf8": "String",
    "int64": "Int64",
    "integer": "Int64",
    "uint64": "UInt64",
    "float64": "Float64",
    "double": "Float64",
    "bool": "Bool",
    "boolean": "Bool",
    "timestamp": "DateTime64(9, 'UTC')",
    "null": "Nullable(Nothing)",
}
"""Parameter type name → ClickHouse type."""


def number_question_marks(sql: str, tokens: Sequence[Token]) -> str:
    """``sql`` with each ``?`` placeholder token renamed ``$1``, ``$2``… in text order.

    ``tokens`` are the tokenizer's tokens of ``sql``, so a ``?`` inside a string, a quoted
    identifier or a comment is not a placeholder and stays as it is.
    """
    marks = [t for t in tokens if t.token_type is TokenType.PLACEHOLDER and t.text == "?"]
    if not marks:
        return sql
    if any(t.token_type is TokenType.PARAMETER for t in tokens):
        raise InvalidParameter(
            "the query mixes '?' and '$n' placeholders; use one style ($1, $2, … preferred)",
            details={"allowed": "$1, $2, … or ?, ?, …"},
        )
    pieces: list[str] = []
    cursor = 0
    for number, mark in enumerate(marks, start=1):
        pieces.append(sql[cursor : mark.start])
        pieces.append(f"${number}")
        cursor = mark.end + 1
    pieces.append(sql[cursor:])
    return "".join(pieces)


def bind_parameters(tree: exp.Expr, parameters: Sequence[QueryParameter]) -> int:
    """Replace every ``$n`` in ``tree`` with the typed literal of ``parameters[n-1]``.

    Returns how many parameters were bound. Raises :class:`InvalidParameter` for a
    placeholder without a parameter, a parameter no placeholder uses, or a value that does not
    match its type.
    """
    literals = [_literal(position, p) for position, p in enumerate(parameters, start=1)]
    used: set[int] = set()
    for node in list(tree.find_all(exp.Parameter, exp.Placeholder)):
        number = _placeholder_number(node)
        if number > len(literals):
            raise InvalidParameter(
                f"placeholder ${number} has no parameter: {len(literals)} given",
                details={"placeholder": f"${number}", "parameters": len(literals)},
            )
        used.add(number)
        node.replace(literals[number - 1].copy())
    unused = [n for n in range(1, len(literals) + 1) if n not in used]
    if unused:
        raise InvalidParameter(
            f"parameter {unused[0]} is never used: the query has no ${unused[0]}",
            details={"parameter": unused[0]},
        )
    return len(literals)


def _placeholder_number(node: exp.Expr) -> int:
    if isinstance(node, exp.Parameter) and not node.args.get("expression"):
        text = node.this.name if isinstance(node.this, exp.Literal) else ""
        # ASCII digits only, and few enough of them: int() refuses "²" and numbers past
        # 4,300 digits with a ValueError the caller would get as a 500
        number = ascii_whole_number(text, max_digits=PLACEHOLDER_DIGITS)
        if number is not None and number >= 1:
            return number
    raise InvalidParameter(
        f"placeholder {node.sql(DIALECT)!r} is not allowed: write $1, $2, … (or ?)",
        details={"placeholder": node.sql(DIALECT), "allowed": "$1, $2, …"},
    )


def _literal(position: int, parameter: QueryParameter) -> exp.Expr:
    kind = parameter.type.lower() if isinstance(parameter.type, str) else ""
    if kind not in TYPES:
        raise InvalidParameter(
            f"parameter {position} has unknown type {parameter.type!r}; "
            f"allowed: {', '.join(TYPES)}",
            details={"parameter": position, "type": parameter.type, "allowed": list(TYPES)},
        )
    value = parameter.value
    if kind == "null" or value is None:
        if value is not None:
            raise _mismatch(position, parameter, "null")
        if kind == "null":
            return exp.Null()
        return exp.cast(exp.Null(), _ch_type(f"Nullable({TYPES[kind]})"))
    if kind in ("string", "utf8"):
        if not isinstance(value, str):
            raise _mismatch(position, parameter, "a string")
        return exp.Literal.string(value)
    if kind in ("bool", "boolean"):
        if not isinstance(value, bool):
            raise _mismatch(position, parameter, "true or false")
        return exp.Boolean(this=value)
    if kind in ("float64", "double"):
        return _float(position, parameter)
    if kind == "timestamp":
        return _timestamp(position, parameter)
    low, high = UINT64 if kind == "uint64" else INT64
    number = _integer(value)
    if number is None or not low <= number <= high:
        raise _mismatch(position, parameter, f"an integer in [{low}, {high}]")
    return exp.cast(exp.Literal.number(number), _ch_type(TYPES[kind]))


def _integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)
    return None


def _float(position: int, parameter: QueryParameter) -> exp.Expr:
    value = parameter.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _mismatch(position, parameter, "a number")
    number = finite_float(value)  # None for a JSON integer past the float range too
    if number is None:
        raise _mismatch(position, parameter, "a finite number")
    return exp.cast(exp.Literal.number(repr(number)), _ch_type("Float64"))


def _timestamp(position: int, parameter: QueryParameter) -> exp.Expr:
    value = parameter.value
    match = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    expected = "an ISO-8601 timestamp such as 2026-01-02T03:04:05.123456789Z"
    if match is None:
        raise _mismatch(position, parameter, expected)
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        moment = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
            tzinfo=UTC,
        )  # fmt: skip
        if sign:
            offset = timedelta(hours=int(off_h), minutes=int(off_m or 0))
            if offset >= timedelta(hours=24):
                raise ValueError("offset out of range")
            moment = moment - offset if sign == "+" else moment + offset
    except ValueError:
        raise _mismatch(position, parameter, expected) from None
    del zulu  # "Z" and no offset both mean UTC
    if not TIMESTAMP_RANGE[0] <= moment < TIMESTAMP_RANGE[1]:
        raise _mismatch(position, parameter, "a timestamp between 1900-01-01 and 2262-04-11")
    nanos = (fraction or "").ljust(9, "0")
    text = f"{moment:%Y-%m-%d %H:%M:%S}.{nanos}"
    return exp.Anonymous(
        this="toDateTime64",
        expressions=[exp.Literal.string(text), exp.Literal.number(9), exp.Literal.string("UTC")],
    )


def _ch_type(name: str) -> exp.DataType:
    return exp.DataType.build(name, dialect="clickhouse")


def _mismatch(position: int, parameter: QueryParameter, expected: str) -> InvalidParameter:
    shown = repr(parameter.value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidParameter(
        f"parameter {position} of type {parameter.type!r} has value {shown}; expected {expected}",
        details={"parameter": position, "type": parameter.type, "expected": expected},
    )
