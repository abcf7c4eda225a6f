"""The store's own statements against its database, on pooled clients.

Each method is one statement. Any failure is :class:`FactStoreUnavailable`: the store's
statements are right by construction, so a failure is the store's, not the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from baml_studio.apierrors import ApiError
from baml_studio.catalog.split import public_schema
from baml_studio.control.facts.batch import BatchKey, ledger_rows
from baml_studio.control.facts.connection import ClientPool, translate
from baml_studio.control.facts.ddl import (
    LEDGER_TABLE,
    SCOPE_COLUMNS,
    eq_sql,
    ident,
    in_list_sql,
    public_relation,
    qualified,
    scope_where_sql,
)
from baml_studio.control.facts.errors import FactStoreUnavailable
from baml_studio.control.facts.ledger import LedgerEntry, LedgerKey
from baml_studio.gateway.config import Scope

T = TypeVar("T")

CLIENT_ERRORS = (ClickHouseError, RuntimeError, OSError)
"""What ``clickhouse_connect`` and raw ``chdb`` raise."""

INSERT_SETTINGS: dict[str, int] = {
    "async_insert": 0,
    "insert_deduplicate": 0,
    "optimize_on_insert": 0,
    "max_threads": 1,
}
"""Synchronous inserts (visible on return) that a server never deduplicates away: a batch
written again after its erasure must land even when its bytes are identical. One thread per
insert: a group's inserts run side by side already, and a pipeline of the default width
cost ~17 % more CPU for the same rows (six relations' inserts of a 150-batch group: 116–121
against 140–146 ms, chDB)."""

WRITE_ORDER = ("_root_id", "_batch_id", "_row")
INSERT_FORMAT = "Parquet"
"""Inserts go as one Parquet file each (:func:`parquet_block`). ClickHouse parses it in about
60 % of the CPU its ``Arrow`` input takes for the same rows (chDB 4.4, the insert as a whole
with the Parquet encoding included: 10–15 against 19–26 ms for ~450 rows of a relation,
15–18 against 27–31 ms for ~800; docs/benchmarks.md), and stores the same values (compared
per relation, and by the round trips in tests/control)."""


def parquet_block(table: pa.Table, compression: str = "none") -> bytes:
    """``table`` as one Parquet file for ``INSERT … FORMAT Parquet``: plain-encoded, without
    statistics or the stored Arrow schema (ClickHouse reads neither); ``compression`` is the
    pages' codec (``none`` in process, ``zstd`` to a server over the network)."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        use_dictionary=False,
        write_statistics=False,
        store_schema=False,
    )
    data: bytes = sink.getvalue().to_pybytes()
    return data


class Tables:
    """Statements on one database's fact tables and ledger."""

    def __init__(self, pool: ClientPool, database: str, *, compression: str = "none") -> None:
        self.pool = pool
        self.database = database
        self.compression = compression
        """The Parquet pages' codec of inserts (:func:`parquet_block`)."""

    def run(self, doing: str, call: Callable[[Client], T]) -> T:
        """``call`` on a pooled client, its failures as :class:`FactStoreUnavailable`."""
        try:
            with self.pool.client() as client:
                return call(client)
        except ApiError:
            raise
        except CLIENT_ERRORS as exc:
            error = translate(exc, doing)
            raise FactStoreUnavailable(error.message, details=error.details) from exc

    def command(self, doing: str, statement: str) -> None:
        self.run(doing, lambda client: client.command(statement))

    def count(self, relation: str, where: str) -> int:
        sql = f"SELECT count() FROM {qualified(self.database, relation)} WHERE {where}"
        rows = self.run(f"count {relation}", lambda client: client.query(sql).result_rows)
        return int(rows[0][0])

    def select_public(self, relation: str, where: str) -> pa.Table:
        """The public columns of the matching rows, in write order, with the public schema."""
        schema = public_schema(public_relation(relation))
        columns = ", ".join(ident(name) for name in schema.names)
        order = ", ".join(ident(c) for c in WRITE_ORDER)
        sql = (
            f"SELECT {columns} FROM {qualified(self.database, relation)} "
            f"WHERE {where} ORDER BY {order}"
        )
        table = self.run(f"read {relation}", lambda client: client.query_arrow(sql))
        return table.cast(schema)

    def batch_rows(self, key: BatchKey) -> pa.Table:
        """The public rows stored under one batch's ``_root_id`` and ``_batch_id``."""
        return self.select_public(key.relation, batch_where(key))

    def read_ledger(self, scope: Scope, generation: str, batch_id: str) -> LedgerEntry | None:
        where = f"{scope_where_sql(scope, generation)} AND {eq_sql('batch_id', batch_id)}"
        found = self._ledger(where)
        return found.get((scope, generation, batch_id))

    def lookup(
        self, keys: Sequence[BatchKey]
    ) -> tuple[dict[LedgerKey, LedgerEntry], set[LedgerKey]]:
        """For a group of batches of any relations, in one statement of the ledger alone:
        the visible entries, and the keys whose newest ledger row is an intent (their rows
        may be stored without a visible ledger row)."""
        where = lookup_where_sql(keys)
        visible: dict[LedgerKey, LedgerEntry] = {}
        intents: set[LedgerKey] = set()
        rows = self.run("batch lookup", lambda client: client.query(self._ledger_sql(where)))
        for key, is_visible, entry in map(_ledger_row, rows.result_rows):
            if is_visible:
                visible[key] = entry
            else:
                intents.add(key)
        return visible, intents

    def _ledger(self, where: str) -> dict[LedgerKey, LedgerEntry]:
        rows = self.run("ledger read", lambda client: client.query(self._ledger_sql(where)))
        return {key: entry for key, visible, entry in map(_ledger_row, rows.result_rows) if visible}

    def _ledger_sql(self, where: str) -> str:
        """The newest ledger row of each matching key, in the shape of :func:`_ledger_row`."""
        head = ", ".join(ident(c) for c in (*SCOPE_COLUMNS, "batch_id"))
        tail = ", ".join(
            ident(c) for c in ("content_digest", "row_count", "root_id", "relation", "partition")
        )
        return (
            f"SELECT {head}, {ident('visible')}, {tail} "
            f"FROM {qualified(self.database, LEDGER_TABLE)} FINAL WHERE {where}"
        )

    def insert_facts(self, relation: str, table: pa.Table) -> None:
        self._insert(f"insert into {relation}", relation, table)

    def _insert(self, doing: str, name: str, table: pa.Table) -> None:
        block = parquet_block(table, self.compression)
        target = qualified(self.database, name)
        self.run(
            doing,
            lambda client: client.raw_insert(
                target, table.column_names, block, settings=INSERT_SETTINGS, fmt=INSERT_FORMAT
            ),
        )

    def insert_ledger(
        self, batches: Sequence[tuple[BatchKey, str, int]], *, written_at_ms: int | None = None
    ) -> None:
        """Visible ledger rows for ``batches`` (their fact rows are stored)."""
        at = time.time_ns() // 1_000_000 if written_at_ms is None else written_at_ms
        self._insert("ledger insert", LEDGER_TABLE, ledger_rows(batches, at))

    def insert_intents(self, batches: Sequence[tuple[BatchKey, str, int]]) -> int:
        """Intent ledger rows for ``batches``, written before their fact rows; returns their
        ``written_at`` (ms), which the visible rows must exceed to replace them."""
        at = time.time_ns() // 1_000_000
        self._insert("intent insert", LEDGER_TABLE, ledger_rows(batches, at, visible=False))
        return at

    def delete(self, table: str, where: str) -> None:
        """A synchronous mutation: it rewrites the parts (so erased values do not stay on
        disk behind a lightweight delete's mask) and returns once every replica applied it."""
        self.command(
            f"delete from {table}",
            f"ALTER TABLE {qualified(self.database, table)} DELETE WHERE {where} "
            "SETTINGS mutations_sync = 2",
        )


def lookup_where_sql(keys: Sequence[BatchKey]) -> str:
    """The ledger rows of ``keys``: per scope and generation, its equalities and ``batch_id
    IN (…)``, OR-ed. The same rows as one tuple ``IN`` over all five key columns, at about
    half the CPU (a group of 150 batches: 6.8 against 11–13 ms), since ClickHouse matches the
    sorting key's prefix once instead of comparing 150 tuples."""
    by_scope: dict[tuple[Scope, str], list[str]] = {}
    for key in keys:
        by_scope.setdefault((key.scope, key.generation), []).append(key.batch_id)
    parts = [
        f"({scope_where_sql(scope, generation)} AND {in_list_sql('batch_id', batch_ids)})"
        for (scope, generation), batch_ids in by_scope.items()
    ]
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def batch_where(key: BatchKey) -> str:
    return (
        f"{scope_where_sql(key.scope, key.generation)} AND {eq_sql('_root_id', key.root_id)} "
        f"AND {eq_sql('_batch_id', key.batch_id)}"
    )


def _ledger_row(row: Sequence[Any]) -> tuple[LedgerKey, bool, LedgerEntry]:
    """``(key, visible, entry)`` of one ledger row: tenant, project, environment,
    generation, batch id, visible (1) or intent (0), digest, row count, root id, relation,
    partition."""
    tenant, project, environment, generation, batch_id, kind, digest, count, root, rel, part = row
    key = (Scope(tenant, project, environment), str(generation), str(batch_id))
    entry = LedgerEntry(str(digest), int(count), str(root), str(rel), int(part))
    return key, int(kind) == 1, entry
