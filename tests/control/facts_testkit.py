"""Helpers for the fact-store tests: a store on the process's one chDB path, sample rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import clickhouse_connect
import pyarrow as pa

from baml_studio.catalog.schema import PUBLIC_RELATIONS, Relation
from baml_studio.catalog.split import public_schema
from baml_studio.control.facts import BatchKey, FactStore, FactStoreConfig
from baml_studio.gateway.config import Scope

SCOPE_A = Scope("tenant_a", "proj", "prod")
SCOPE_B = Scope("tenant_b", "proj", "prod")
RELATIONS: dict[str, Relation] = {r.name: r for r in PUBLIC_RELATIONS}


@contextmanager
def open_store(dsn: str, database: str, **config: Any) -> Iterator[FactStore]:
    """A store with its schema; on exit it is closed and its database dropped (a chDB path
    slows down as databases pile up)."""
    store = FactStore.connect(FactStoreConfig(dsn=dsn, database=database, **config))
    try:
        store.ensure_schema()
        yield store
    finally:
        store.close()
        client = clickhouse_connect.get_client(dsn=dsn)
        try:
            client.command(f"DROP DATABASE IF EXISTS {database} SYNC")
        finally:
            client.close()


def sample_rows(relation: str, n: int = 3, *, seed: str = "r") -> pa.Table:
    """``n`` rows with ``relation``'s public schema: every column filled, every third nullable
    value NULL, strings carrying quotes and backslashes."""
    schema = public_schema(RELATIONS[relation])
    columns: dict[str, list[Any]] = {}
    for field in schema:
        values = [_value(field, seed, i) for i in range(n)]
        if field.nullable:
            values = [None if i % 3 == 2 else v for i, v in enumerate(values)]
        columns[field.name] = values
    return pa.Table.from_pydict(columns, schema=schema)


def _value(field: pa.Field, seed: str, i: int) -> Any:
    if pa.types.is_list(field.type):
        return [f"{seed}-{i}", "o'k\\"] if i % 2 == 0 else []
    if field.type == pa.string():
        return f"{seed}-{field.name}-{i}-'q'\\"
    if field.type == pa.bool_():
        return i % 2 == 0
    if pa.types.is_timestamp(field.type):
        return dt.datetime(2026, 1, 2, 3, 4, 5, i, tzinfo=dt.UTC)
    if field.type == pa.uint64():
        return (1 << 64) - 1 - i
    if field.type == pa.uint32():
        return (1 << 32) - 1 - i
    raise AssertionError(f"no sample for {field}")


def key(
    relation: str,
    root: str,
    *,
    scope: Scope = SCOPE_A,
    generation: str = "gen_1",
    partition: int = 0,
    batch_id: str | None = None,
) -> BatchKey:
    return BatchKey(
        scope=scope,
        generation=generation,
        batch_id=batch_id or f"{root}.{relation}.{partition}",
        root_id=root,
        relation=relation,
        partition=partition,
    )
