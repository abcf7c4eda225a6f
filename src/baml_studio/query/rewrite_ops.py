"""Small AST helpers of the rewriter: operators, literals, subscripts, output SELECTs, WHERE
gates, and the arguments of baml_value_json() / baml_value_cid()."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Protocol

import sqlglot
from sqlglot import exp

from baml_studio.format.values import InvalidValueJson, from_json_text, to_json_text
from baml_studio.query.errors import InvalidSql
from baml_studio.query.resolve import ident
from baml_studio.query.semantics import Path

DIALECT = "postgres"
INDEX_OFFSET = sqlglot.Dialect.get_or_raise(DIALECT).INDEX_OFFSET
"""sqlglot stores ``x[n]`` of a 1-based dialect as ``n - 1``; we read the index as written."""

COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_INTEGER = re.compile(r"-?[0-9]+")
CID_PATTERN = re.compile(r"bamlv_1_[0-9a-f]{64}")


def is_call(node: exp.Expr | None, name: str) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == name


def _int_literal(node: exp.Expr) -> int | None:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Literal) and not inner.is_string and _INTEGER.fullmatch(inner.this):
        value = int(inner.this)
        return -value if negative else value
    return None


def subscript(bracket: exp.Expr) -> str | int:
    """The key of one subscript of a value expression: a string or an integer as written."""
    keys = bracket.expressions
    if len(keys) == 1:
        key = keys[0]
        if isinstance(key, exp.Literal) and key.is_string:
            return str(key.this)
        index = _int_literal(key)
        if index is not None:
            return index + INDEX_OFFSET
    raise InvalidSql(
        f"{bracket.sql(dialect=DIALECT)}: a value column takes literal subscripts only",
        "write a quoted key such as args['customer'] or an integer index such as output[0]",
    )


def literal_json(node: exp.Expr | None) -> str | None:
    """A SQL literal as JSON text (the value it denotes), or None if ``node`` is no literal."""
    if isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal) and node.is_string:
        return json.dumps(node.this, ensure_ascii=False)
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, exp.Null):
        return "null"
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative and node is not None else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        text = ("-" if negative else "") + str(inner.this)
        if _INTEGER.fullmatch(text):
            return str(int(text))
        number = float(text)
        if not math.isfinite(number):
            raise InvalidSql(f"numeric literal {text} is out of range", "use a finite number")
        return json.dumps(number)
    return None


def output_selects(node: exp.Expr) -> list[exp.Select]:
    """The SELECTs whose lists are the query's result columns (every branch of a UNION)."""
    if isinstance(node, exp.Subquery):
        return output_selects(node.this)
    if isinstance(node, exp.SetOperation):
        return output_selects(node.this) + output_selects(node.expression)
    return [node] if isinstance(node, exp.Select) else []


def select_aliases(select: exp.Select) -> set[str]:
    return {ident(e.args["alias"]) for e in select.expressions if isinstance(e, exp.Alias)}


class _UseLike(Protocol):
    top: exp.Expr
    select: exp.Select | None


def where_gates(uses: Sequence[_UseLike]) -> dict[int, exp.Expr]:
    """id(use) → the gate of a use inside its SELECT's WHERE: the AND of that WHERE's top-level
    conjuncts that hold no value expression and no subquery (TRUE when there are none)."""
    located: list[tuple[_UseLike, exp.Select, exp.Expr]] = []
    value_conjuncts: dict[int, set[int]] = {}
    for use in uses:
        found = _where_conjunct(use.top, use.select)
        if found is not None and use.select is not None:
            located.append((use, use.select, found))
            value_conjuncts.setdefault(id(use.select), set()).add(id(found))
    gates: dict[int, exp.Expr] = {}
    templates: dict[int, exp.Expr] = {}
    for use, select, _ in located:
        if id(select) not in templates:
            public = [
                c.copy()
                for c in _conjuncts(select)
                if id(c) not in value_conjuncts[id(select)] and c.find(exp.Query) is None
            ]
            templates[id(select)] = exp.and_(*public) if public else exp.true()
        gates[id(use)] = templates[id(select)]
    return gates


def _conjuncts(select: exp.Select) -> list[exp.Expr]:
    where = select.args.get("where")
    if where is None:
        return []
    condition = where.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _where_conjunct(node: exp.Expr, select: exp.Select | None) -> exp.Expr | None:
    """The top-level WHERE conjunct of ``select`` that holds ``node``, if any."""
    if select is None or select.args.get("where") is None:
        return None
    conjuncts = {id(c): c for c in _conjuncts(select)}
    current: exp.Expr | None = node
    while current is not None and current is not select:
        if id(current) in conjuncts:
            return current
        if isinstance(current, exp.Where):
            return None
        current = current.parent
    return None


def path_json(path: Path) -> str:
    return json.dumps(list(path), separators=(",", ":"), ensure_ascii=False)


def _single_string(call: exp.Expr) -> str:
    args = call.expressions
    if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise InvalidSql(
            f"{call.name}() takes one string literal, got {call.sql(dialect=DIALECT)}",
            f"write {call.name}('…') with a quoted literal",
        )
    return str(args[0].this)


def json_argument(call: exp.Expr, op: str) -> exp.Expr:
    if op not in ("=", "<>"):
        raise InvalidSql(
            f"baml_value_json() compares with = or <> only, not {op}",
            "use = or <>, or compare a scalar path with a plain literal",
        )
    text = _single_string(call)
    try:
        return exp.Literal.string(to_json_text(from_json_text(text)))
    except InvalidValueJson as exc:
        raise InvalidSql(f"baml_value_json({text!r}): {exc}", InvalidValueJson.remedy) from exc


def cid_argument(call: exp.Expr, op: str, *, has_path: bool = False) -> exp.Expr:
    text = _single_string(call)
    if not CID_PATTERN.fullmatch(text):
        raise InvalidSql(
            f"baml_value_cid({text!r}) is not a value CID",
            "write bamlv_1_ followed by 64 lower-case hex digits (see the *_cid columns)",
        )
    if op not in ("=", "<>") or has_path:
        raise InvalidSql(
            "baml_value_cid() identifies a whole value: compare it with = or <> to a bare "
            "value column or a *_cid column",
            "for example args_cid = baml_value_cid('bamlv_1_…')",
        )
    return exp.Literal.string(text)
