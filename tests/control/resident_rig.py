"""A small fact store on the process's one chDB path for the resident-compiler tests.

``build_facts`` creates two databases with one table per public relation:

* ``mixed`` holds rows of the authorised scope (tenant ``A``, project ``P``, environment
  ``E``, generation ``g1``) and of five other scopes (another tenant, project, environment or
  generation), with the scope columns ``tenant_id``, ``project_id``, ``environment_id`` and
  ``generation`` beside the public columns;
* ``oracle`` holds only the authorised scope's rows, without scope columns.

A query compiled with :meth:`Facts.scoped_sql` over ``mixed`` must answer exactly what the same
query compiled with :meth:`Facts.oracle_sql` answers over ``oracle``: any row of another scope
that leaked in would change the answer. Every row of another scope also carries values that
would be visible (execution ids ``exec_B_…``, durations over a million).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import clickhouse_connect
import pyarrow as pa

from baml_studio.catalog.schema import PUBLIC_RELATIONS, Column, Relation
from baml_studio.control.resident import CompiledQuery, QueryParameter, compile_resident

SCOPE = ("A", "P", "E", "g1")
OTHER_SCOPES = (("B", "P", "E", "g1"), ("A", "P", "E", "g2"), ("A", "P2", "E", "g1"),
                ("A", "P", "E2", "g1"), ("B", "P2", "E2", "g2"))  # fmt: skip
SCOPE_MARK = "tenant_id = 'A'"
"""Text of the scope predicate as it appears in compiled SQL, once per relation reference."""
ROWS_IN_SCOPE = 40
ROWS_PER_OTHER_SCOPE = 15
FQNS = ("pkg.Extract", "pkg.Classify", "pkg.Summarize", "pkg.Route")
STATUSES = ("ok", "errored", "cancelled", None)
BASE_TIME = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def clickhouse_type(column: Column) -> str:
    arrow = column.type
    if pa.types.is_list(arrow):
        return "Array(String)"
    if pa.types.is_string(arrow):
        base = "String"
    elif pa.types.is_boolean(arrow):
        base = "Bool"
    elif pa.types.is_timestamp(arrow):
        base = "DateTime64(9, 'UTC')"
    elif arrow == pa.uint32():
        base = "UInt32"
    elif arrow == pa.uint64():
        base = "UInt64"
    else:
        raise AssertionError(f"no ClickHouse type for {arrow}")
    return f"Nullable({base})" if column.nullable else base


def _tag(scope: tuple[str, str, str, str]) -> str:
    return "_".join(scope)


def _value(column: Column, scope: tuple[str, str, str, str], i: int, rng: random.Random) -> Any:
    name, arrow, tag = column.name, column.type, _tag(scope)
    other = scope != SCOPE
    if column.nullable and not column.key and rng.random() < 0.15:
        return None
    if name == "execution_id":
        return f"exec_{tag}_{i % 6}"
    if name in ("thread_id", "throw_thread_id", "parent_thread_id"):
        return f"thr_{tag}_{i % 7}"
    if name in ("error_id",):
        return f"err_{tag}_{i % 9}"
    if name in ("call_id", "throw_call_id", "parent_call_id", "spawn_call_id"):
        return f"call_{tag}_{i}"
    if name in ("fqn", "throw_fqn", "entry_fqn", "spawn_fqn"):
        return FQNS[i % len(FQNS)]
    if name in ("status", "end_status"):
        return STATUSES[i % 3]
    if name == "metric":
        return f"metric_{i % 5}"
    if pa.types.is_list(arrow):
        return [f"{name}_{k}" for k in range(i % 3)] + (["input"] if i % 2 else [])
    if pa.types.is_string(arrow):
        return f"{name}_{tag if other else 'in'}_{i % 4}"
    if pa.types.is_boolean(arrow):
        return i % 3 != 0
    if pa.types.is_timestamp(arrow):
        shift = dt.timedelta(minutes=17 * i, microseconds=i)
        return BASE_TIME + shift + (dt.timedelta(days=400) if other else dt.timedelta())
    # integers: in scope small and distinct, other scopes huge, so a leak shows in any aggregate
    return (1_000_000 if other else 0) + (i * 37) % 101 + i


@dataclass(frozen=True)
class Facts:
    dsn: str
    mixed: str
    oracle: str

    def client(self) -> Any:
        """A fresh connection (chDB may carry a failed query's output into the next one)."""
        return clickhouse_connect.get_client(dsn=self.dsn)

    def scoped_sql(self, name: str) -> str:
        relation = _relation(name)
        columns = ", ".join(c.name for c in relation.public_columns())
        tenant, project, environment, generation = SCOPE
        return (
            f"SELECT {columns} FROM {self.mixed}.{name} WHERE tenant_id = '{tenant}' "
            f"AND project_id = '{project}' AND environment_id = '{environment}' "
            f"AND generation = '{generation}'"
        )

    def oracle_sql(self, name: str) -> str:
        columns = ", ".join(c.name for c in _relation(name).public_columns())
        return f"SELECT {columns} FROM {self.oracle}.{name}"

    def compile(self, sql: str, parameters: Sequence[QueryParameter] = ()) -> CompiledQuery:
        return compile_resident(sql, list(parameters), relation_sql=self.scoped_sql)

    def run(self, compiled: CompiledQuery) -> list[tuple[Any, ...]]:
        result = self.client().query(compiled.sql, settings=compiled.settings)
        return [tuple(row) for row in result.result_rows]

    def columns(self, compiled: CompiledQuery) -> tuple[str, ...]:
        return tuple(self.client().query(compiled.sql, settings=compiled.settings).column_names)

    def run_oracle(
        self, sql: str, parameters: Sequence[QueryParameter] = ()
    ) -> list[tuple[Any, ...]]:
        compiled = compile_resident(sql, list(parameters), relation_sql=self.oracle_sql)
        return self.run(compiled)


def _relation(name: str) -> Relation:
    for relation in PUBLIC_RELATIONS:
        if relation.name == name:
            return relation
    raise AssertionError(name)


def build_facts(dsn: str) -> Iterator[Facts]:
    """Create, fill, yield and drop the two databases (names unique to this run)."""
    suffix = uuid.uuid4().hex[:16]
    facts = Facts(dsn, f"t_{suffix}_mixed", f"t_{suffix}_oracle")
    client = facts.client()
    rng = random.Random(7)
    for database in (facts.mixed, facts.oracle):
        client.command(f"CREATE DATABASE {database}")
    for relation in PUBLIC_RELATIONS:
        public = relation.public_columns()
        body = ", ".join(f"{c.name} {clickhouse_type(c)}" for c in public)
        scope_columns = (
            "tenant_id String, project_id String, environment_id String, generation String"
        )
        client.command(
            f"CREATE TABLE {facts.mixed}.{relation.name} ({scope_columns}, {body}) "
            "ENGINE = MergeTree ORDER BY (tenant_id, project_id, environment_id, generation)"
        )
        client.command(
            f"CREATE TABLE {facts.oracle}.{relation.name} ({body}) "
            "ENGINE = MergeTree ORDER BY tuple()"
        )
        names = [c.name for c in public]
        mixed_rows: list[list[Any]] = []
        oracle_rows: list[list[Any]] = []
        for scope in (SCOPE, *OTHER_SCOPES):
            count = ROWS_IN_SCOPE if scope == SCOPE else ROWS_PER_OTHER_SCOPE
            for i in range(count):
                row = [_value(c, scope, i, rng) for c in public]
                mixed_rows.append([*scope, *row])
                if scope == SCOPE:
                    oracle_rows.append(row)
        scope_names = ["tenant_id", "project_id", "environment_id", "generation"]
        client.insert(
            f"{facts.mixed}.{relation.name}", mixed_rows, column_names=[*scope_names, *names]
        )
        client.insert(f"{facts.oracle}.{relation.name}", oracle_rows, column_names=names)
    try:
        yield facts
    finally:
        for database in (facts.mixed, facts.oracle):
            facts.client().command(f"DROP DATABASE IF EXISTS {database}")


def normalise(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows in a canonical order with floats rounded, for comparing two answers."""

    def cell(value: Any) -> Any:
        if isinstance(value, float):
            return None if math.isnan(value) else round(value, 6)
        if isinstance(value, list):
            return tuple(cell(v) for v in value)
        return value

    return sorted((tuple(cell(v) for v in row) for row in rows), key=repr)


def in_scope_values(facts: Facts, relation: str, column: str) -> list[Any]:
    rows = facts.client().query(f"SELECT {column} FROM {facts.oracle}.{relation}").result_rows
    return [row[0] for row in rows]


__all__ = ["BASE_TIME", "FQNS", "ROWS_IN_SCOPE", "SCOPE", "SCOPE_MARK", "Facts", "build_facts"]


def assert_every_table_is_scoped(compiled_sql: str, database: str = "db") -> int:
    """Re-parse compiled SQL as ClickHouse and check that every table it reads is a catalog
    table inside its own scoped derived table, or a renamed CTE. Returns the scoped reads."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(compiled_sql, dialect="clickhouse")
    scoped = 0
    for table in tree.find_all(exp.Table):
        if table.name.startswith("__resident_cte_") and not table.db:
            continue
        assert table.db == database, f"unscoped table {table.sql('clickhouse')}"
        select = table.find_ancestor(exp.Select)
        assert select is not None and isinstance(select.parent, exp.Subquery)
        where = select.args.get("where")
        assert where is not None and SCOPE_MARK in where.sql("clickhouse"), select.sql("clickhouse")
        assert len(list(select.find_all(exp.Table))) == 1
        scoped += 1
    return scoped
