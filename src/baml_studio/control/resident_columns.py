"""Columns: output names, qualification against the public schema, and the column check.

:func:`name_outputs` gives every unnamed output expression of the top-level query a
deterministic alias: its own PostgreSQL text with identifiers unquoted and function names in
lower case (``count(*)``, ``sum(calls_v1.duration_ns)``), or ``_col_<position>`` when that text
is over 128 characters or holds a quote, backslash or control character. A bare column keeps its
name and an aliased expression its alias, so ClickHouse (which would call ``count(*)``
``count()``) answers with the names the caller wrote. ClickHouse cannot return two different
expressions under one name, so :func:`dedupe_outputs` renames a later repeat (``SELECT
c.execution_id, t.execution_id`` answers ``execution_id``, ``execution_id_2``).

:func:`qualify_columns` qualifies every column with sqlglot's ``qualify`` over a schema of
public columns only (stars expand to public columns), then checks each column against what its
source really exposes: a relation's public columns, a CTE's or subquery's output columns, or a
select alias in ORDER BY. Anything else, private columns included, is ``column_not_allowed``.
"""

from __future__ import annotations

import re

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.qualify_columns import validate_qualify_columns
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from baml_studio.catalog.schema import PUBLIC_RELATIONS, Relation
from baml_studio.control.resident_check import DIALECT, RELATION_NAMES
from baml_studio.control.resident_errors import ColumnNotAllowed

MAX_ALIAS_CHARS = 128
_UNSAFE_ALIAS = re.compile(r"[\x00-\x1f\x7f\\\"`]")


def _sql_type(arrow: pa.DataType) -> str:
    if pa.types.is_string(arrow):
        return "TEXT"
    if pa.types.is_boolean(arrow):
        return "BOOLEAN"
    if pa.types.is_timestamp(arrow):
        return "TIMESTAMPTZ"
    if pa.types.is_integer(arrow):
        return "BIGINT"
    if pa.types.is_list(arrow):
        return f"{_sql_type(arrow.value_type)}[]"
    raise ValueError(f"no SQL type for Arrow type {arrow}")  # a new catalog type needs a mapping


SCHEMA: dict[str, dict[str, str]] = {
    name: {c.name: _sql_type(c.type) for c in relation.public_columns()}
    for relation in PUBLIC_RELATIONS
    for name in (relation.name, *relation.aliases)
}
"""Public columns of every public relation, under its canonical name and every alias."""


def new_schema() -> MappingSchema:
    """A sqlglot schema of :data:`SCHEMA`, fresh for each query: sqlglot caches every table
    and name it looks up inside a schema, so a shared one would grow with every query."""
    mapping: dict[str, object] = dict(SCHEMA)
    return MappingSchema(mapping, dialect=DIALECT)


def name_outputs(query: exp.Expr) -> None:
    """Alias the unnamed output expressions of the top-level query (all set-operation branches)."""
    if isinstance(query, exp.SetOperation):
        name_outputs(query.this)
        name_outputs(query.expression)
        return
    if isinstance(query, exp.Subquery):
        name_outputs(query.this)
        return
    if not isinstance(query, exp.Select):
        return
    for position, selection in enumerate(query.expressions):
        if isinstance(selection, exp.Alias | exp.Column | exp.Star):
            continue
        selection.replace(
            exp.alias_(selection.copy(), _output_name(selection, position), quoted=True)
        )


def _output_name(selection: exp.Expr, position: int) -> str:
    shown = selection.copy()
    for identifier in shown.find_all(exp.Identifier):
        identifier.set("quoted", False)
    text = shown.sql(DIALECT, normalize_functions="lower", comments=False)
    if len(text) > MAX_ALIAS_CHARS or _UNSAFE_ALIAS.search(text):
        return f"_col_{position}"
    return text


def qualify_columns(tree: exp.Expr, schema: MappingSchema) -> exp.Expr:
    """``tree`` with every column qualified by its source; refuses columns that are not public."""
    try:
        qualified = qualify(
            tree,
            schema=schema,
            dialect=DIALECT,
            validate_qualify_columns=False,
            allow_partial_qualification=True,
            quote_identifiers=True,
            identify=True,
        )
    except OptimizeError as exc:
        raise ColumnNotAllowed(
            f"the query's columns could not be resolved against the public catalog: {exc}",
            details={"reason": str(exc)},
        ) from exc
    scopes = traverse_scope(qualified)
    for scope in scopes:
        for column in scope.columns:
            _check_column(scope, column, qualified)
    for column in qualified.find_all(exp.Column):
        if not column.table and not _is_output_reference(column):
            raise _unknown(column, qualified)
    try:
        validate_qualify_columns(qualified)
    except OptimizeError as exc:
        raise ColumnNotAllowed(
            f"a column could not be resolved: {exc}", details={"reason": str(exc)}
        ) from exc
    return qualified


def dedupe_outputs(tree: exp.Expr) -> None:
    """Rename later output columns that repeat an earlier name for a different expression.

    ClickHouse aliases are global to a query, so ``SELECT c.execution_id, t.execution_id``
    (or ``SELECT *`` over a join) cannot name both ``execution_id``: the second becomes
    ``execution_id_2`` (then ``_3``…). A repeated identical expression keeps its name.
    """
    for select in tree.find_all(exp.Select):
        taken = {e.alias_or_name for e in select.expressions}
        first: dict[str, exp.Expr] = {}
        for selection in select.expressions:
            if not isinstance(selection, exp.Alias):
                continue
            name = selection.alias
            if name not in first:
                first[name] = selection.this
                continue
            if selection.this == first[name]:
                continue
            number = 2
            while f"{name}_{number}" in taken:
                number += 1
            taken.add(f"{name}_{number}")
            selection.set("alias", exp.to_identifier(f"{name}_{number}", quoted=True))


def annotate(tree: exp.Expr, schema: MappingSchema) -> exp.Expr:
    """Annotate types, so the generator keeps PostgreSQL's integer division (ClickHouse's
    ``/`` is always float division): ``int / int`` becomes ``CAST(a / b AS Int64)``."""
    return annotate_types(tree, schema=schema, dialect=DIALECT)


def _check_column(scope: Scope, column: exp.Column, tree: exp.Expr) -> None:
    if isinstance(column.this, exp.Star):
        raise ColumnNotAllowed(
            f"{column.sql(DIALECT)} could not be expanded to public columns; name the columns",
            details={"column": column.sql(DIALECT)},
        )
    if not column.table:
        if _is_output_reference(column):
            return
        raise _unknown(column, tree)
    source = _source(scope, column.table)
    if isinstance(source, exp.Table):
        relation = RELATION_NAMES.get(source.name)
        public = SCHEMA.get(source.name, {})
        if relation is None or column.name not in public:
            raise _not_public(column, relation)
        return
    if isinstance(source, Scope) and isinstance(source.expression, exp.Query):
        outputs = source.expression.named_selects
        if column.name in outputs and "*" not in outputs:
            return
        raise ColumnNotAllowed(
            f"column {column.name!r} is not an output column of {column.table!r}; "
            f"it has: {', '.join(outputs)}",
            details={"column": column.name, "source": column.table, "allowed": outputs},
        )
    raise ColumnNotAllowed(
        f"column {column.sql(DIALECT)} names {column.table!r}, which is not a table or alias "
        "in scope here",
        details={"column": column.name, "source": column.table},
    )


def _source(scope: Scope, name: str) -> exp.Table | Scope | None:
    current: Scope | None = scope
    while current is not None:
        found = current.sources.get(name)
        if isinstance(found, exp.Table | Scope):
            return found
        current = current.parent
    return None


def _is_output_reference(column: exp.Column) -> bool:
    """An unqualified name in ORDER BY that is an output column of its query."""
    order = column.find_ancestor(exp.Order, exp.Select, exp.SetOperation)
    if not isinstance(order, exp.Order):
        return False
    query = order.parent
    return isinstance(query, exp.Query) and column.name in query.named_selects


def _unknown(column: exp.Column, tree: exp.Expr) -> ColumnNotAllowed:
    name = column.name
    referenced = {
        relation.name: relation
        for table in tree.find_all(exp.Table)
        if (relation := RELATION_NAMES.get(table.name)) is not None
    }
    for relation in referenced.values():
        if name in {c.name for c in relation.private_columns()}:
            return _not_public(column, relation)
    return ColumnNotAllowed(
        f"column {name!r} is not a public column of any relation in scope (or it is "
        f"ambiguous: qualify it); relations in the query: {', '.join(sorted(referenced))}",
        details={"column": name},
    )


def _not_public(column: exp.Column, relation: Relation | None) -> ColumnNotAllowed:
    name = column.name
    if relation is None:
        return ColumnNotAllowed(f"column {name!r} is not public", details={"column": name})
    public = [c.name for c in relation.public_columns()]
    if name in {c.name for c in relation.private_columns()}:
        why = (
            f"it is a private column of {relation.name} and stays in the data plane "
            "(the coordinator evaluates it over Lance)"
        )
    else:
        why = f"{relation.name} has no such column"
    return ColumnNotAllowed(
        f"column {name!r} is not allowed: {why}; public columns: {', '.join(public)}",
        details={"column": name, "relation": relation.name, "allowed": public},
    )
