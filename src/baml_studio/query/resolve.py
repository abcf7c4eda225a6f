"""Which column references are virtual value columns (``args``, ``output``, ``error``,
``errors.value``), resolved through sqlglot scopes.

A reference is virtual when it names a virtual column of a catalog relation, directly or through
derived tables and CTEs that pass the column through bare (``SELECT args FROM calls``, or ``*``):
those keep the handle, so the outer query can still subscript and compare it. ``health.value``
is an ordinary column; an ambiguous or unknown reference is left to the planner.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from baml_studio.catalog.schema import BY_NAME
from baml_studio.query.names import lookup, view_columns

_MAX_DEPTH = 16


def ident(node: exp.Expr) -> str:
    """An identifier as the planner sees it: unquoted names fold to lower case."""
    if isinstance(node, exp.Identifier):
        return node.name if node.quoted else node.name.lower()
    return node.name.lower()


def column_role(column: exp.Column, scope: Scope, internal: bool, depth: int = 0) -> str | None:
    """The virtual role (``input``/``output``/``error``) of a reference, or None."""
    if depth > _MAX_DEPTH or isinstance(column.this, exp.Star):
        return None
    name = ident(column.this)
    source = _find_source(scope, column.table, name, internal)
    if source is None:
        return None
    return _source_role(source, name, internal, depth)


def leftmost_select(node: exp.Expr) -> exp.Select | None:
    while isinstance(node, exp.SetOperation | exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _find_source(
    scope: Scope, qualifier: str, name: str, internal: bool
) -> exp.Table | Scope | None:
    current: Scope | None = scope
    while current is not None:
        if qualifier:
            source = current.sources.get(qualifier)
            if source is None:
                source = current.sources.get(qualifier.lower())
            if isinstance(source, exp.Table | Scope):
                return source
        else:
            hits = [
                src
                for _, src in current.selected_sources.values()
                if name in source_columns(src, internal)
            ]
            if len(hits) > 1:
                return None
            if hits:
                return hits[0]
        current = current.parent
    return None


def source_columns(source: object, internal: bool, depth: int = 0) -> set[str]:
    """The column names a FROM source offers (empty when unknown)."""
    if depth > _MAX_DEPTH:
        return set()
    if isinstance(source, exp.Table):
        if source.db or not isinstance(source.this, exp.Identifier):
            return set()
        ref = lookup(source.name, internal)
        if ref is None:
            return set()
        if ref.relation is not None:
            return {c.name for c in ref.relation.columns}
        if ref.view is not None:
            return set(view_columns(ref.view))
        return set()
    if not isinstance(source, Scope):
        return set()
    select = leftmost_select(source.expression)
    if select is None:
        return set()
    names: set[str] = set()
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for _, src in source.selected_sources.values():
                names |= source_columns(src, internal, depth + 1)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            names |= source_columns(source.sources.get(item.table), internal, depth + 1)
        elif isinstance(item, exp.Alias):
            names.add(ident(item.args["alias"]))
        elif isinstance(item, exp.Column):
            names.add(ident(item.this))
    return names


def _source_role(source: exp.Table | Scope, name: str, internal: bool, depth: int) -> str | None:
    if isinstance(source, exp.Table):
        ref = lookup(source.name, internal) if not source.db else None
        if ref is None or ref.relation is None:
            return None
        relation = BY_NAME[ref.relation.name]
        for column in relation.columns:
            if column.name == name:
                return column.role
        return None
    select = leftmost_select(source.expression)
    if select is None:
        return None
    inner_scope = _scope_of(source, select)
    for item in select.expressions:
        if isinstance(item, exp.Alias) and ident(item.args["alias"]) == name:
            inner = item.this
            if isinstance(inner, exp.Column):
                return column_role(inner, inner_scope, internal, depth + 1)
            return None
        if isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            if ident(item.this) == name:
                return column_role(item, inner_scope, internal, depth + 1)
        elif isinstance(item, exp.Star):
            return column_role(exp.column(name), inner_scope, internal, depth + 1)
        elif isinstance(item, exp.Column) and name in _star_columns(item, inner_scope, internal):
            probe = exp.column(name, table=item.table)
            return column_role(probe, inner_scope, internal, depth + 1)
    return None


def _star_columns(item: exp.Column, scope: Scope, internal: bool) -> set[str]:
    """The columns ``t.*`` expands to."""
    return source_columns(scope.sources.get(item.table), internal) if item.table else set()


def _scope_of(scope: Scope, select: exp.Select) -> Scope:
    """The scope of a set operation's leftmost branch (or the scope itself)."""
    current = scope
    while current.expression is not select and current.is_set_operation:
        current = current.set_operation_scopes[0]
    return current
