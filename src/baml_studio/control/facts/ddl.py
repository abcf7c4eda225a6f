"""ClickHouse DDL and scoped reads derived from the public/private split (pure: text out).

One table per public relation of catalog v1 holds exactly the relation's public columns
(:func:`baml_studio.catalog.split.public_schema`) plus :data:`INTERNAL_COLUMNS`. Sort keys put
scope and generation first, because every read is restricted to one of each, then what reads
filter on (:data:`SORT_KEYS`). ``calls_v1`` sorts by ``ifNull(fqn, '')``: measured on chDB 4.4,
``fqn = 'x'`` and ``fqn IN (...)`` prune granules through that key exactly as through a nullable
key (only ``fqn IS NULL`` is not pruned). Then by the wall-clock ``started_at`` (not the
process-relative ``started_ns``, which interleaves processes and cannot prune a time window):
a range condition prunes through a nullable timestamp key column as it is, not through
``ifNull`` around it (measured on chDB 4.4: 245 of 245 granules read with ``ifNull``, 49 without),
so those tables carry ``allow_nullable_key = 1``.

Categorical string columns (:data:`LOW_CARDINALITY`: function names, kinds, states, statuses,
reasons; and the scope columns) are ``LowCardinality``: measured on chDB 4.4 over 15 million
calls, a 24 h ``GROUP BY fqn`` (2.6 million rows) fell from 80–100 ms to 45–55 ms, because the
scope filter and the grouping compare dictionary positions instead of strings. Arrow reads of
them still return plain strings (``output_format_arrow_low_cardinality_as_dictionary`` is off).

Every SQL literal is written exactly as sqlglot's ClickHouse dialect writes it (quotes doubled,
backslashes and control characters escaped; :func:`string_sql` is one ``str.translate`` with
sqlglot's table, property-tested byte for byte against sqlglot), and every identifier is quoted,
so no value can end a literal.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse

from baml_studio.catalog.schema import PUBLIC_RELATIONS, Relation, resolve
from baml_studio.catalog.split import key_columns, public_schema
from baml_studio.control.facts.config import DATABASE_NAME
from baml_studio.gateway.config import Scope

LEDGER_TABLE = "projection_batches"

SCOPE_COLUMNS = ("tenant_id", "project_id", "environment_id", "generation")

INTERNAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant_id", "LowCardinality(String)"),
    ("project_id", "LowCardinality(String)"),
    ("environment_id", "LowCardinality(String)"),
    ("generation", "LowCardinality(String)"),
    ("_root_id", "String"),
    ("_batch_id", "String"),
    ("_row", "UInt32"),
)
"""Columns every fact table adds to the public ones; never selected by a scoped read."""

LEDGER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant_id", "String"),
    ("project_id", "String"),
    ("environment_id", "String"),
    ("generation", "String"),
    ("batch_id", "String"),
    ("root_id", "String"),
    ("relation", "String"),
    ("partition", "UInt32"),
    ("row_count", "UInt64"),
    ("content_digest", "String"),
    ("written_at", "DateTime64(3, 'UTC')"),
    ("visible", "UInt8 DEFAULT 1"),
)
"""The newest row of a key (``written_at``) decides: ``visible = 1`` the batch is visible;
``visible = 0`` an intent, written before the batch's rows, so that only a batch with an
intent and no visible row can have rows stored without a ledger row (a crash between the two
inserts), and a put looks in the fact table for such rows only then."""

SORT_KEYS: dict[str, tuple[str, ...]] = {
    "threads_v1": ("started_at", "execution_id", "thread_id"),
    "calls_v1": ("fqn", "started_at", "execution_id", "call_id"),
}
"""Sort columns after scope and generation; other relations sort by their key columns."""

SET_KEYS: dict[str, tuple[str, ...]] = {"function_definitions_v1": ("program_id", "function_id")}
"""Relations re-sent by every execution of a program: a scoped read keeps one row per key."""

LOW_CARDINALITY = frozenset(
    {
        "fqn",
        "spawn_fqn",
        "entry_fqn",
        "throw_fqn",
        "definition_key",
        "kind",
        "kind_detail",
        "origin",
        "edge_kind",
        "status",
        "end_status",
        "args_state",
        "output_state",
        "error_state",
        "value_state",
        "index_state",
        "error_lost_reason",
        "call_path_overflow_reason",
        "overflow_reason",
        "metric",
        "plane",
        "reason",
        "source",
        "source_label",
        "program_id",
        "revision_id",
        "package",
        "namespace",
    }
)
"""Public string columns with few distinct values per scope: stored ``LowCardinality``."""

PUBLIC_TABLES: dict[str, Relation] = {r.name: r for r in PUBLIC_RELATIONS}

_SCALAR_TYPES: tuple[tuple[pa.DataType, str], ...] = (
    (pa.string(), "String"),
    (pa.uint32(), "UInt32"),
    (pa.uint64(), "UInt64"),
    (pa.bool_(), "Bool"),
    (pa.binary(), "String"),
    (pa.timestamp("ns", tz="UTC"), "DateTime64(9, 'UTC')"),
)


def clickhouse_type(field: pa.Field) -> str:
    """The ClickHouse type of one public Arrow field; ``ValueError`` for a type with no mapping."""
    if pa.types.is_list(field.type) and field.type.value_type == pa.string():
        return "Array(String)"
    for arrow_type, name in _SCALAR_TYPES:
        if field.type == arrow_type:
            typed = f"Nullable({name})" if field.nullable else name
            if field.type == pa.string() and field.name in LOW_CARDINALITY:
                return f"LowCardinality({typed})"
            return typed
    known = ", ".join(str(t) for t, _ in _SCALAR_TYPES)
    raise ValueError(
        f"column {field.name!r} has Arrow type {field.type}, which has no ClickHouse mapping: "
        f"use one of {known} or list<string>, or add a mapping in facts/ddl.py"
    )


def public_relation(name: str) -> Relation:
    """The public relation called ``name`` (or one of its aliases); ``KeyError`` naming the
    valid ones otherwise."""
    relation = resolve(name)
    if relation is None or relation.internal:
        raise KeyError(f"{name!r} is not a public relation: use one of {', '.join(PUBLIC_TABLES)}")
    return relation


def table_columns(relation: Relation) -> list[tuple[str, str]]:
    """``(name, ClickHouse type)`` of the relation's table: public columns, then internal."""
    public = [(f.name, clickhouse_type(f)) for f in public_schema(relation)]
    return [*public, *INTERNAL_COLUMNS]


def sort_key(relation: Relation) -> list[str]:
    """The ``ORDER BY`` expressions of the relation's table, scope and generation first."""
    columns = SORT_KEYS.get(relation.name) or tuple(key_columns(relation))
    expressions = [ident(c) for c in SCOPE_COLUMNS]
    for name in columns:
        column = relation.column(name)
        string = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        expressions.append(
            f"ifNull({ident(name)}, '')" if column.nullable and string else ident(name)
        )
    return expressions


def nullable_key(relation: Relation) -> bool:
    """Whether the relation's sort key holds a nullable column as it is (a timestamp: an
    ``ifNull`` around it would stop a range condition from pruning by the key)."""
    columns = SORT_KEYS.get(relation.name) or tuple(key_columns(relation))
    return any(
        relation.column(name).nullable and "ifNull" not in expression
        for name, expression in zip(columns, sort_key(relation)[len(SCOPE_COLUMNS) :], strict=True)
    )


def create_database_sql(database: str) -> str:
    return f"CREATE DATABASE IF NOT EXISTS {ident(_database(database))}"


def create_table_sql(
    relation: Relation, database: str, *, merge_selector_base: float | None = None
) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for one public relation; ``merge_selector_base`` (a
    MergeTree setting, left out when ``None``: a server that does not know it)."""
    columns = table_columns(relation)
    lines = [f"{ident(name)} {type_}" for name, type_ in columns]
    names = {name for name, _ in columns}
    if "execution_id" in names:
        lines.append(
            f"INDEX idx_execution_id {ident('execution_id')} TYPE bloom_filter GRANULARITY 1"
        )
    lines.append(f"INDEX idx_root_id {ident('_root_id')} TYPE bloom_filter GRANULARITY 1")
    if "started_ns" in names:
        lines.append(f"INDEX idx_started_ns {ident('started_ns')} TYPE minmax GRANULARITY 1")
    body = ",\n    ".join(lines)
    return (
        f"CREATE TABLE IF NOT EXISTS {qualified(database, relation.name)} (\n    {body}\n)\n"
        f"ENGINE = MergeTree\nORDER BY ({', '.join(sort_key(relation))})"
        + _settings_clause(relation, merge_selector_base)
    )


def _settings_clause(relation: Relation, merge_selector_base: float | None) -> str:
    settings = ["allow_nullable_key = 1"] if nullable_key(relation) else []
    if merge_selector_base is not None:
        settings.append(f"merge_selector_base = {merge_selector_base:g}")
    return "\nSETTINGS " + ", ".join(settings) if settings else ""


def merge_setting_sql(relation: Relation, database: str, merge_selector_base: float) -> str:
    """The fact table's ``merge_selector_base`` set on a table that already exists."""
    return (
        f"ALTER TABLE {qualified(database, relation.name)} "
        f"MODIFY SETTING merge_selector_base = {merge_selector_base:g}"
    )


def create_ledger_sql(database: str) -> str:
    """The ledger: one row per visible batch, the newest write of a key kept."""
    lines = [f"{ident(name)} {type_}" for name, type_ in LEDGER_COLUMNS]
    lines.append(f"INDEX idx_root_id {ident('root_id')} TYPE bloom_filter GRANULARITY 1")
    body = ",\n    ".join(lines)
    order = ", ".join(ident(c) for c in (*SCOPE_COLUMNS, "batch_id"))
    return (
        f"CREATE TABLE IF NOT EXISTS {qualified(database, LEDGER_TABLE)} (\n    {body}\n)\n"
        f"ENGINE = ReplacingMergeTree(written_at)\nORDER BY ({order})"
    )


MERGE_SETTING_PROBE = (
    "SELECT count() FROM system.merge_tree_settings WHERE name = 'merge_selector_base'"
)
"""Whether the server knows ``merge_selector_base`` (an older one would refuse the table)."""


def schema_sql(database: str, *, merge_selector_base: float | None = None) -> list[str]:
    """Every statement :meth:`FactStore.ensure_schema` runs, in order (all idempotent): with a
    ``merge_selector_base``, each fact table gets it (also one created before the setting)."""
    merge = (
        [merge_setting_sql(r, database, merge_selector_base) for r in PUBLIC_RELATIONS]
        if merge_selector_base is not None
        else []
    )
    return [
        create_database_sql(database),
        *(
            create_table_sql(r, database, merge_selector_base=merge_selector_base)
            for r in PUBLIC_RELATIONS
        ),
        *merge,
        create_ledger_sql(database),
        # a ledger created before intents existed: its rows are all visible ones
        f"ALTER TABLE {qualified(database, LEDGER_TABLE)} "
        "ADD COLUMN IF NOT EXISTS `visible` UInt8 DEFAULT 1",
    ]


def relation_select_sql(
    relation: Relation | str, database: str, scope: Scope, generation: str
) -> str:
    """A parenthesised derived table over one relation restricted to ``scope`` and
    ``generation``, selecting exactly the public columns in catalog order. The resident query
    compiler puts it (with an alias) where the query names the relation. A relation in
    :data:`SET_KEYS` reads as a set: one row per key (the copy of the smallest root id, batch
    and position, so the choice is deterministic; the copies are the same definition)."""
    rel = public_relation(relation) if isinstance(relation, str) else public_relation(relation.name)
    select = (
        exp.select(*(exp.column(f.name, quoted=True) for f in public_schema(rel)))
        .from_(exp.table_(rel.name, db=_database(database), quoted=True))
        .where(scope_condition(scope, generation))
    )
    set_key = SET_KEYS.get(rel.name)
    if set_key:
        order = [*set_key, "_root_id", "_batch_id", "_row"]
        select = select.order_by(*(exp.column(c, quoted=True) for c in order))
        by = [exp.column(c, quoted=True) for c in set_key]
        select.set("limit", exp.Limit(expression=exp.Literal.number(1), expressions=by))
    return f"({select.sql(dialect='clickhouse')})"


def scope_condition(
    scope: Scope, generation: str, *, prefix: tuple[str, ...] = SCOPE_COLUMNS
) -> exp.Condition:
    """``tenant_id = … AND project_id = … AND environment_id = … AND generation = …``."""
    values = (scope.tenant, scope.project, scope.environment, generation)
    return exp.and_(
        *(exp.column(c, quoted=True).eq(literal(v)) for c, v in zip(prefix, values, strict=True))
    )


def scope_where_sql(scope: Scope, generation: str) -> str:
    return scope_condition(scope, generation).sql(dialect="clickhouse")


def in_list_sql(column: str, values: Sequence[str]) -> str:
    """``column IN ('a', 'b')`` with every value a safe literal."""
    return f"{ident(column)} IN ({', '.join(map(string_sql, values))})"


def tuple_in_sql(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``(a, b) IN (('x', 'y'), …)`` with every value a safe literal."""
    target = ", ".join(ident(c) for c in columns)
    values = ", ".join(f"({', '.join(map(string_sql, row))})" for row in rows)
    return f"({target}) IN ({values})"


def eq_sql(column: str, value: str) -> str:
    return f"{ident(column)} = {string_sql(value)}"


def literal(value: str) -> exp.Literal:
    return exp.Literal.string(value)


_STRING_ESCAPES = str.maketrans({**ClickHouse.ESCAPED_SEQUENCES, "'": "''"})
"""sqlglot's ClickHouse string escapes (backslash, control characters) and the doubled quote."""


def string_sql(value: str) -> str:
    """``value`` as a ClickHouse string literal, exactly as sqlglot's ClickHouse dialect writes
    ``exp.Literal.string(value)`` (property-tested), in one ``str.translate``: the ledger
    lookups of a busy control plane write thousands of literals a second, and building and
    generating sqlglot expressions for them cost ~5 % of its CPU."""
    return "'" + value.translate(_STRING_ESCAPES) + "'"


@functools.lru_cache(maxsize=1024)
def ident(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="clickhouse")


def qualified(database: str, table: str) -> str:
    return f"{ident(_database(database))}.{ident(table)}"


def _database(database: str) -> str:
    if not DATABASE_NAME.fullmatch(database):
        raise ValueError(
            f"database {database!r} is not a plain identifier: use letters, digits and '_'"
        )
    return database
