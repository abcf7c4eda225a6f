"""Which relations a query reads, and the executions each may be restricted to (§5.5).

Only ``execution_id = '…'`` and ``execution_id IN ('…', …)`` in the top-level ``AND`` conjuncts
of a ``SELECT``'s ``WHERE`` restrict a table (qualified by its alias, or unqualified when the
``SELECT`` reads that one table). Such a filter is exact for inner and outer joins alike: a row
of that table that fails it never survives the ``WHERE``. Several conjuncts intersect; several
references to one relation unite, and one unrestricted reference makes the relation unrestricted.
The filters stay in the SQL, so the restriction only saves folding work.

A catalog view counts as a reference to the relation it reads (with the view's own filter).
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope

from baml_studio.query.names import lookup, view_relation

Restriction = frozenset[str] | None
"""Execution ids a relation is restricted to; None means every execution."""

EXECUTION_ID = "execution_id"


def needed_relations(query: exp.Expr, internal: bool) -> dict[str, Restriction]:
    """Versioned relation name → the executions the query can see of it."""
    needs: dict[str, Restriction] = {}
    for table, restriction in _table_restrictions(query):
        ref = lookup(table.name, internal) if not table.db else None
        if ref is None:
            continue
        relation = ref.relation or (view_relation(ref.view) if ref.view else None)
        if relation is None:
            continue
        if EXECUTION_ID not in {c.name for c in relation.columns}:
            restriction = None
        if relation.name not in needs:
            needs[relation.name] = restriction
        else:
            before = needs[relation.name]
            needs[relation.name] = (
                None if before is None or restriction is None else (before | restriction)
            )
    return needs


def _table_restrictions(query: exp.Expr) -> Iterator[tuple[exp.Table, Restriction]]:
    try:
        scopes = traverse_scope(query)
    except SqlglotError:
        for table in query.find_all(exp.Table):
            if isinstance(table.this, exp.Identifier):
                yield table, None
        return
    for scope in scopes:
        restricted = _restrictions(scope)
        for table in scope.tables:
            if not isinstance(table.this, exp.Identifier):
                continue
            if isinstance(scope.sources.get(table.alias_or_name), Scope):
                continue  # a CTE reference
            yield table, restricted.get(id(table))


def _restrictions(scope: Scope) -> dict[int, frozenset[str]]:
    """id(Table node) → the intersection of the execution filters on it."""
    select = scope.expression
    where = select.args.get("where") if isinstance(select, exp.Select) else None
    if where is None:
        return {}
    condition = where.this
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    out: dict[int, frozenset[str]] = {}
    for conjunct in conjuncts:
        found = _execution_filter(conjunct)
        if found is None:
            continue
        column, ids = found
        table = _table_of(scope, column)
        if table is not None:
            out[id(table)] = out[id(table)] & ids if id(table) in out else ids
    return out


def _execution_filter(node: exp.Expr) -> tuple[exp.Column, frozenset[str]] | None:
    if isinstance(node, exp.EQ):
        for col, lit in ((node.this, node.expression), (node.expression, node.this)):
            if _is_execution_id(col) and _is_string(lit):
                return col, frozenset([lit.name])
    if isinstance(node, exp.In) and _is_execution_id(node.this) and not node.args.get("query"):
        values = node.expressions
        if values and all(_is_string(v) for v in values):
            return node.this, frozenset(v.name for v in values)
    return None


def _is_execution_id(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and node.name.lower() == EXECUTION_ID


def _is_string(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def _table_of(scope: Scope, column: exp.Column) -> exp.Table | None:
    if column.table:
        source = scope.sources.get(column.table)
        return source if isinstance(source, exp.Table) else None
    selected = list(scope.selected_sources.values())
    if len(selected) == 1 and isinstance(selected[0][1], exp.Table):
        return selected[0][1]
    return None
