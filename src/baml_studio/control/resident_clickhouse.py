"""From a checked, qualified PostgreSQL tree to scoped ClickHouse SQL.

:func:`rewrite_functions` turns the allowlisted PostgreSQL functions sqlglot does not transpile
faithfully into their ClickHouse forms:

* ``percentile_cont(p) WITHIN GROUP (ORDER BY x)`` → ``quantileExactInclusive(p)(x)``
  (``1 - p`` for ``DESC``): linear interpolation, as PostgreSQL;
* ``percentile_disc(p) WITHIN GROUP (ORDER BY x)`` → the ``ceil(p · count(x))``-th value of
  ``arraySort(groupArray(x))`` (``arrayReverseSort`` for ``DESC``), NULL for no rows: PostgreSQL's
  definition exactly (none of ClickHouse's ``quantileExact*`` variants matches it);
* ``approx_percentile_cont(x, p)`` (DataFusion) or ``approx_percentile_cont(p) WITHIN GROUP
  (ORDER BY x)`` → ``quantileTDigest(p)(x)``;
* ``bool_and(b)`` / ``bool_or(b)`` → ``min(b)`` / ``max(b)``;
* ``array_agg(x)`` → ``groupArray(x)`` (NULL elements are skipped);
* ``try_cast(x AS t)`` → ``accurateCastOrNull(x, 't')``;
* ``cast(x AS timestamp[tz])`` and ``to_timestamp(s)`` → ``DateTime64(9, 'UTC')``;
* ``concat(a, b, …)`` → ``concat(ifNull(toString(a), ''), …)`` (NULL is empty, as PostgreSQL);
* ``x = ANY(subquery)`` → ``x IN (subquery)`` (sqlglot would turn it into ``has()``).

:func:`inject_scope` replaces every reference to a public relation (found with the same CTE
visibility rules the check used) by ``(<relation_sql(name)>) AS <alias>`` and renames every CTE
to ``__resident_cte_<n>`` so that no name in the generated SQL can reach a table other than
through the scoped derived tables.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from baml_studio.apierrors import ApiError
from baml_studio.control.resident_check import (
    DIALECT,
    RELATION_NAMES,
    RESERVED_PREFIX,
    visible_ctes,
)
from baml_studio.control.resident_errors import FunctionNotAllowed

CLICKHOUSE = "clickhouse"
CTE_PREFIX = f"{RESERVED_PREFIX}cte_"
UTC_DATETIME64 = "DateTime64(9, 'UTC')"


class ResidentCompilerError(ApiError):
    """A defect in the compiler or the relation SQL it was given (500, not the caller's fault)."""

    code = "resident_compiler_error"


def rewrite_functions(tree: exp.Expr) -> exp.Expr:
    """Rewrite the functions ClickHouse spells differently (see the module table)."""
    return tree.transform(_rewrite, copy=False)


def _rewrite(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any):
        inner = node.expression.this
        if isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Subquery | exp.Query):
            query = inner.this if isinstance(inner, exp.Subquery) else inner
            return exp.In(this=node.this, query=exp.Subquery(this=query))
        return node
    if isinstance(node, exp.WithinGroup):
        return _within_group(node)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "approx_percentile_cont":
        if not 2 <= len(node.expressions) <= 3:
            raise FunctionNotAllowed(
                "approx_percentile_cont takes (x, p) or (p) WITHIN GROUP (ORDER BY x)",
                details={"function": "approx_percentile_cont"},
            )
        value, fraction = node.expressions[0], node.expressions[1]
        return _parameterized(
            "quantileTDigest", _fraction(fraction, "approx_percentile_cont"), value
        )
    if isinstance(node, exp.LogicalAnd):
        return exp.Min(this=node.this)
    if isinstance(node, exp.LogicalOr):
        return exp.Max(this=node.this)
    if isinstance(node, exp.ArrayAgg):
        return exp.Anonymous(this="groupArray", expressions=[node.this])
    if isinstance(node, exp.TryCast):
        target = _target_type(node.to).sql(CLICKHOUSE)
        return exp.Anonymous(
            this="accurateCastOrNull", expressions=[node.this, exp.Literal.string(target)]
        )
    if isinstance(node, exp.Cast):
        node.set("to", _target_type(node.to))
        return node
    if isinstance(node, exp.UnixToTime):
        return _datetime64(node.this)
    if isinstance(node, exp.Concat):
        parts = [
            exp.Anonymous(
                this="ifNull",
                expressions=[
                    exp.Anonymous(this="toString", expressions=[a]),
                    exp.Literal.string(""),
                ],
            )
            for a in node.expressions
        ]
        return exp.Anonymous(this="concat", expressions=parts)
    return node


def _within_group(node: exp.WithinGroup) -> exp.Expr:
    function = node.this
    order = node.expression
    ordered = order.expressions if isinstance(order, exp.Order) else []
    name = function.sql_name().lower() if isinstance(function, exp.Func) else "WITHIN GROUP"
    if isinstance(function, exp.Anonymous):
        name = function.name.lower()
    if len(ordered) != 1 or not isinstance(ordered[0], exp.Ordered):
        raise FunctionNotAllowed(
            f"{name} needs exactly one ORDER BY expression in WITHIN GROUP",
            details={"function": name},
        )
    value = ordered[0].this
    descending = bool(ordered[0].args.get("desc"))
    arguments = function.expressions if isinstance(function, exp.Anonymous) else [function.this]
    if len(arguments) != 1:
        raise FunctionNotAllowed(f"{name} takes one fraction", details={"function": name})
    fraction = _fraction(arguments[0], name)
    if isinstance(function, exp.PercentileDisc):
        return _percentile_disc(value, fraction, descending)
    if descending:
        fraction = 1.0 - fraction
    aggregate = (
        "quantileExactInclusive" if isinstance(function, exp.PercentileCont) else "quantileTDigest"
    )
    return _parameterized(aggregate, fraction, value)


def _percentile_disc(value: exp.Expr, fraction: float, descending: bool) -> exp.Expr:
    count = exp.Count(this=value.copy())
    position = exp.Anonymous(
        this="toUInt64",
        expressions=[
            exp.Greatest(
                this=exp.Literal.number(1),
                expressions=[
                    exp.Ceil(
                        this=exp.Mul(this=exp.Literal.number(repr(fraction)), expression=count)
                    )
                ],
            )
        ],
    )
    sort = "arrayReverseSort" if descending else "arraySort"
    values = exp.Anonymous(
        this=sort, expressions=[exp.Anonymous(this="groupArray", expressions=[value])]
    )
    picked = exp.Anonymous(this="arrayElement", expressions=[values, position])
    return exp.If(
        this=exp.EQ(this=count.copy(), expression=exp.Literal.number(0)),
        true=exp.Null(),
        false=picked,
    )


def _fraction(node: exp.Expr, name: str) -> float:
    inner = node.this if isinstance(node, exp.Cast) else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            value = float(inner.this)
        except ValueError:
            value = -1.0
        if 0.0 <= value <= 1.0:
            return value
    raise FunctionNotAllowed(
        f"{name} needs a constant fraction between 0 and 1, got {node.sql(DIALECT)}",
        details={"function": name, "fraction": node.sql(DIALECT)},
    )


def _parameterized(name: str, fraction: float, value: exp.Expr) -> exp.Expr:
    return exp.ParameterizedAgg(
        this=name, expressions=[exp.Literal.number(repr(fraction))], params=[value]
    )


def _datetime64(value: exp.Expr) -> exp.Expr:
    return exp.Anonymous(
        this="toDateTime64",
        expressions=[value, exp.Literal.number(9), exp.Literal.string("UTC")],
    )


def _target_type(to: exp.DataType) -> exp.DataType:
    if to.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ):
        return exp.DataType.build(f"Nullable({UTC_DATETIME64})", dialect=CLICKHOUSE)
    return to


@dataclass(frozen=True, slots=True)
class Scoped:
    """What :func:`inject_scope` did."""

    tree: exp.Expr
    relations: frozenset[str]
    """Canonical names of the relations read."""
    references: int
    """Relation references replaced by scoped derived tables."""


def inject_scope(tree: exp.Expr, relation_sql: Callable[[str], str]) -> Scoped:
    """Replace every public relation reference with its scoped derived table; rename CTEs.

    Afterwards every table in the tree is either inside one of the scoped derived tables or a
    renamed CTE reference; anything else is a :class:`ResidentCompilerError`.
    """
    ctes = {id(cte): f"{CTE_PREFIX}{n}" for n, cte in enumerate(tree.find_all(exp.CTE), start=1)}
    plan: list[tuple[exp.Table, str | None]] = []
    for table in tree.find_all(exp.Table):
        if table.name in visible_ctes(table):
            plan.append((table, _cte_target(table, ctes)))
            continue
        relation = RELATION_NAMES.get(table.name)
        if relation is None or relation.internal or table.db or table.catalog:
            raise ResidentCompilerError(
                f"unchecked table {table.sql(DIALECT)!r} reached scope injection"
            )
        plan.append((table, None))
    parsed: dict[str, exp.Query] = {}
    injected: list[exp.Subquery] = []
    for table, cte_name in plan:
        if cte_name is not None:
            table.set("this", exp.to_identifier(cte_name, quoted=True))
            continue
        relation = RELATION_NAMES[table.name]
        if relation.name not in parsed:
            parsed[relation.name] = _parse_relation(relation.name, relation_sql(relation.name))
        derived = exp.Subquery(
            this=parsed[relation.name].copy(),
            alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name, quoted=True)),
        )
        table.replace(derived)
        injected.append(derived)
    for cte in list(tree.find_all(exp.CTE)):
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(ctes[id(cte)], quoted=True)))
    _check_injected(tree, injected)
    return Scoped(tree, frozenset(parsed), len(injected))


def _check_injected(tree: exp.Expr, injected: list[exp.Subquery]) -> None:
    inside = {id(node) for derived in injected for node in derived.this.walk()}
    for table in tree.find_all(exp.Table):
        if id(table) in inside:
            continue
        if table.name.startswith(CTE_PREFIX) and not table.db and not table.catalog:
            continue
        raise ResidentCompilerError(f"table {table.sql(CLICKHOUSE)!r} escaped scope injection")


def _cte_target(table: exp.Table, ctes: dict[int, str]) -> str:
    """The new name of the CTE ``table`` refers to: the nearest visible definition."""
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        candidates: list[exp.CTE] = []
        if isinstance(node, exp.With):
            for cte in node.expressions:
                if cte is child:
                    break
                candidates.append(cte)
        else:
            with_ = node.args.get("with_")
            if isinstance(with_, exp.With) and with_ is not child:
                candidates = list(with_.expressions)
        for cte in reversed(candidates):
            if cte.alias == table.name:
                return ctes[id(cte)]
        child, node = node, node.parent
    raise ResidentCompilerError(f"CTE {table.name!r} has no visible definition")


@functools.lru_cache(maxsize=256)
def _parse_relation(name: str, sql: str) -> exp.Query:
    """The parsed relation SQL, cached by text (a scope and generation repeat across queries):
    callers copy it and never change the cached tree."""
    try:
        parsed = sqlglot.parse_one(sql, dialect=CLICKHOUSE)
    except SqlglotError as exc:
        raise ResidentCompilerError(f"relation SQL of {name} does not parse: {exc}") from exc
    while isinstance(parsed, exp.Subquery) and not parsed.alias:
        parsed = parsed.this  # "(SELECT …)": the compiler adds its own parentheses and alias
    if not isinstance(parsed, exp.Query):
        raise ResidentCompilerError(f"relation SQL of {name} is not a query")
    return parsed


def generate(tree: exp.Expr) -> str:
    """ClickHouse SQL text of ``tree``, without comments."""
    for node in tree.walk():
        if node.comments:
            node.comments = None
    return tree.sql(dialect=CLICKHOUSE, comments=False)
