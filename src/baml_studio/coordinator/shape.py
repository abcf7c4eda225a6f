"""What a query needs from the catalog: the coordinator's classification and pruning.

:func:`query_shape` reads an admitted query (a sqlglot tree of the catalog dialect) and answers:

* ``relations``: every relation the query reads, with the executions it is restricted to
  (:func:`baml_studio.query.pushdown.needed_relations`);
* ``columns``: per relation, the columns any part of the query may read (``None``: all, for
  ``*`` or a view) — columns are matched by name across the query, a superset, never less;
* ``filters``: per relation, a public predicate (catalog SQL over its unqualified columns) that
  every row the query can use satisfies, or ``None``. A reference contributes the ``AND`` of its
  scope's ``WHERE`` conjuncts that read only public columns of that table through simple,
  null-rejecting predicates (comparisons, ``IN`` lists, ``BETWEEN``, ``LIKE``); references
  ``OR`` together; an unfiltered reference makes the relation unfiltered. A scope with an outer
  join contributes nothing (its ``WHERE`` may keep NULL-extended rows);
* ``private``: whether the query reads a private column (a value, a source location, a thread
  name) or a value expression, and so needs Lance.

The predicates only *prune*: the full SQL still runs over the rows they keep, so a predicate
pruned here is re-checked by the engine, and a predicate left out only costs reading more.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope

from baml_studio.catalog.schema import Relation, View, Visibility
from baml_studio.coordinator.value_index import ValuePredicate, value_predicate
from baml_studio.query.names import TableRef, lookup, view_relation
from baml_studio.query.pushdown import Restriction, needed_relations

DIALECT = "postgres"
QueryClass = Literal["public", "private", "mixed"]
_PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Like)
_LEAVES = (exp.Column, exp.Literal, exp.Boolean, exp.Identifier, exp.Neg, exp.Paren, exp.Tuple)
_CASTS = (exp.Cast, exp.DataType, exp.DataTypeParam, exp.Var)


@dataclass(frozen=True, slots=True)
class QueryShape:
    relations: dict[str, Restriction]
    columns: dict[str, frozenset[str] | None]
    filters: dict[str, str | None]
    private: bool
    views: bool
    """The query reads a catalog view (the resident API knows only relations)."""
    values: dict[str, tuple[ValuePredicate, ...]] = field(default_factory=dict)
    """Per relation read once, the value predicates every row it can use satisfies
    (answered from the value index, :mod:`.value_index`)."""

    @property
    def query_class(self) -> QueryClass:
        if not self.private:
            return "public"
        restricted = all(r is not None for r in self.relations.values())
        return "private" if restricted else "mixed"


def query_shape(query: exp.Expr) -> QueryShape:
    needs = needed_relations(query, internal=False)
    refs = list(_references(query))
    viewed = [ref.view for ref in _lookups(query) if ref.view is not None]
    columns = _columns(query, needs, viewed)
    filters = _filters(refs, needs)
    private = _reads_private(query, columns)
    values = _values(refs)
    return QueryShape(needs, columns, filters, private, bool(viewed), values)


@dataclass(frozen=True, slots=True)
class _Reference:
    relation: Relation
    predicate: exp.Expr | None
    values: tuple[ValuePredicate, ...] = ()


def _lookups(query: exp.Expr) -> Iterator[TableRef]:
    for table in query.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and not table.db:
            ref = lookup(table.name, internal=False)
            if ref is not None:
                yield ref


def _columns(
    query: exp.Expr, needs: dict[str, Restriction], views: list[View]
) -> dict[str, frozenset[str] | None]:
    star = any(_is_select_star(s) for s in query.find_all(exp.Star))
    named = {c.name.lower() for c in query.find_all(exp.Column) if c.name}
    for view in views:  # a view's own columns and filter columns
        named |= {c.name.lower() for c in sqlglot.parse_one(view.sql).find_all(exp.Column)}
    out: dict[str, frozenset[str] | None] = {}
    for name in needs:
        ref = lookup(name, internal=False)
        relation = ref.relation if ref is not None else None
        if relation is None or star:
            out[name] = None
            continue
        keys = {c.name for c in relation.columns if c.key}
        out[name] = frozenset({c.name for c in relation.columns if c.name in named} | keys)
    return out


def _is_select_star(star: exp.Star) -> bool:
    parent = star.parent
    return isinstance(parent, exp.Select | exp.Column) or parent is None


def _reads_private(query: exp.Expr, columns: dict[str, frozenset[str] | None]) -> bool:
    if any(isinstance(n, exp.Bracket | exp.Dot) for n in query.walk()):
        return True  # value subscripts and struct access
    for name, cols in columns.items():
        ref = lookup(name, internal=False)
        relation = ref.relation if ref is not None else None
        if relation is None:
            continue
        private = {c.name for c in relation.private_columns()}
        if cols is None and private:
            return True
        if cols is not None and cols & private:
            return True
    return False


def _references(query: exp.Expr) -> Iterator[_Reference]:
    try:
        scopes = traverse_scope(query)
    except SqlglotError:
        return
    for scope in scopes:
        for table, predicate, values in _scope_references(scope):
            ref = lookup(table.name, internal=False)
            if ref is None:
                continue
            if ref.relation is not None:
                yield _Reference(ref.relation, predicate, values)
            elif ref.view is not None:
                yield _Reference(view_relation(ref.view), None)


def _scope_references(
    scope: Scope,
) -> Iterator[tuple[exp.Table, exp.Expr | None, tuple[ValuePredicate, ...]]]:
    select = scope.expression
    tables = [
        t
        for t in scope.tables
        if isinstance(t.this, exp.Identifier)
        and not t.db
        and not isinstance(scope.sources.get(t.alias_or_name), Scope)
    ]
    where = select.args.get("where") if isinstance(select, exp.Select) else None
    outer = isinstance(select, exp.Select) and any(
        (j.side or "").upper() in ("LEFT", "RIGHT", "FULL") or (j.kind or "").upper() == "OUTER"
        for j in select.args.get("joins") or []
    )
    for table in tables:
        if where is None or outer:
            yield table, None, ()
            continue
        yield (
            table,
            _table_predicate(scope, table, where.this),
            _table_values(scope, table, where.this),
        )


def _table_values(
    scope: Scope, table: exp.Table, condition: exp.Expr
) -> tuple[ValuePredicate, ...]:
    ref = lookup(table.name, internal=False)
    if ref is None or ref.relation is None:
        return ()
    single = len(scope.selected_sources) == 1

    def owns(column: exp.Column) -> bool:
        return column.table == table.alias_or_name if column.table else single

    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    found = (value_predicate(ref.relation.name, c, owns) for c in conjuncts)
    return tuple(p for p in found if p is not None)


def _values(refs: list[_Reference]) -> dict[str, tuple[ValuePredicate, ...]]:
    by_relation: dict[str, list[_Reference]] = {}
    for ref in refs:
        by_relation.setdefault(ref.relation.name, []).append(ref)
    return {
        name: found[0].values
        for name, found in by_relation.items()
        if len(found) == 1 and found[0].values
    }


def _table_predicate(scope: Scope, table: exp.Table, condition: exp.Expr) -> exp.Expr | None:
    ref = lookup(table.name, internal=False)
    relation = ref.relation if ref is not None else None
    if relation is None:
        return None
    public = {c.name for c in relation.columns if c.visibility is Visibility.PUBLIC}
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    kept = []
    for conjunct in conjuncts:
        unqualified = _prunable(scope, table, conjunct, public)
        if unqualified is not None:
            kept.append(unqualified)
    if not kept:
        return None
    return exp.and_(*kept) if len(kept) > 1 else kept[0]


def _prunable(scope: Scope, table: exp.Table, node: exp.Expr, public: set[str]) -> exp.Expr | None:
    """``node`` with its columns unqualified, if it is a simple predicate on ``table``'s public
    columns only; else None."""
    if isinstance(node, exp.Paren):
        return _prunable(scope, table, node.this, public)
    if isinstance(node, exp.Or):
        # the disjuncts of a chain of ORs, by a walk that does not recurse (a chain of 200
        # ORs, one node each, recursed past Python's limit)
        disjuncts = []
        for term in node.flatten():
            kept = _prunable(scope, table, term, public)
            if kept is None:
                return None
            disjuncts.append(kept)
        return exp.or_(*disjuncts)
    if not isinstance(node, _PREDICATES):
        return None
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        return None
    single = len(scope.selected_sources) == 1
    for sub in node.walk():
        if isinstance(sub, exp.Column):
            if sub.name.lower() not in public:
                return None
            if sub.table and sub.table != table.alias_or_name:
                return None
            if not sub.table and not single:
                return None
        elif not isinstance(sub, _PREDICATES + _LEAVES + _CASTS):
            return None
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        column.set("table", None)
    return copy


def _filters(refs: list[_Reference], needs: dict[str, Restriction]) -> dict[str, str | None]:
    by_relation: dict[str, list[exp.Expr | None]] = {}
    for ref in refs:
        by_relation.setdefault(ref.relation.name, []).append(ref.predicate)
    out: dict[str, str | None] = {}
    for name in needs:
        predicates = by_relation.get(name, [None])
        if any(p is None for p in predicates):
            out[name] = None
            continue
        unique = list({p.sql(dialect=DIALECT): p for p in predicates if p is not None}.values())
        combined = exp.or_(*unique) if len(unique) > 1 else unique[0]
        out[name] = combined.sql(dialect=DIALECT)
    return out
