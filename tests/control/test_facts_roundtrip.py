"""Hypothesis: any batch of any relation comes back from the fact store exactly as it went in
(inserts travel as Parquet: ``facts.tables.parquet_block``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from arrow_strategies import NS_MAX, NS_MIN, batches
from facts_testkit import RELATIONS, SCOPE_A, key, open_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.catalog.split import public_schema
from baml_studio.control.facts import FactStore, relation_select_sql

CALLS = public_schema(RELATIONS["calls_v1"])


def calls_batches() -> st.SearchStrategy[pa.Table]:
    return batches(CALLS)


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[FactStore]:
    with open_store(chdb_dsn, f"t_{uuid.uuid4().hex[:16]}") as opened:
        yield opened


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=calls_batches())
def test_calls_batches_round_trip_exactly(store: FactStore, batch: pa.Table) -> None:
    generation = f"gen_{uuid.uuid4().hex}"
    k = key("calls_v1", "root_h", generation=generation)
    assert store.put_batch(k, batch, "sha256:h").row_count == batch.num_rows
    assert store.rows("calls_v1", SCOPE_A, generation).equals(batch)
    derived = relation_select_sql("calls_v1", store.config.database, SCOPE_A, generation)
    by_query = store.query_arrow(f"SELECT * FROM {derived} AS c", {})
    assert by_query.num_rows == batch.num_rows
    assert by_query.schema.names == CALLS.names
    assert store.put_batch(k, batch, "sha256:h").state == "existing"


@pytest.mark.parametrize("relation", sorted(RELATIONS))
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_relations_batches_round_trip_exactly(
    store: FactStore, relation: str, data: st.DataObject
) -> None:
    batch = data.draw(batches(public_schema(RELATIONS[relation])))
    generation = f"gen_{uuid.uuid4().hex}"
    k = key(relation, "root_r", generation=generation)
    assert store.put_batch(k, batch, "sha256:r").row_count == batch.num_rows
    assert store.rows(relation, SCOPE_A, generation).equals(batch)


def extreme(field: pa.Field, high: bool) -> Any:
    if pa.types.is_list(field.type):
        return ["\x00", "'\\", "\U0001f600"] if high else []
    if field.type == pa.string():
        return "\x00'\\\n\U0001f600" if high else ""
    if field.type == pa.uint32():
        return 2**32 - 1 if high else 0
    if field.type == pa.uint64():
        return 2**64 - 1 if high else 0
    return NS_MAX if high else NS_MIN


def extremes() -> pa.Table:
    """calls_v1 rows at the highest and lowest values of every column, and one all null."""
    rows = [{f.name: extreme(f, high) for f in CALLS} for high in (True, False)]
    rows.append({f.name: None if f.nullable else extreme(f, True) for f in CALLS})
    timestamps = {f.name for f in CALLS if pa.types.is_timestamp(f.type)}
    columns = {
        f.name: pa.array([r[f.name] for r in rows], pa.int64()).cast(f.type)
        if f.name in timestamps
        else [r[f.name] for r in rows]
        for f in CALLS
    }
    return pa.Table.from_pydict(columns, schema=CALLS)


def test_calls_extremes_round_trip(store: FactStore) -> None:
    batch = extremes()
    generation = f"gen_{uuid.uuid4().hex}"
    store.put_batch(key("calls_v1", "root_x", generation=generation), batch, "sha256:x")
    got = store.rows("calls_v1", SCOPE_A, generation)
    assert got.equals(batch)
    assert got.column("started_at").cast(pa.int64()).to_pylist() == [NS_MAX, NS_MIN, None]


def test_zstd_pages_round_trip_too(store: FactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store on a ClickHouse server sends its Parquet pages compressed with zstd."""
    monkeypatch.setattr(store._tables, "compression", "zstd")
    batch = extremes()
    generation = f"gen_{uuid.uuid4().hex}"
    store.put_batch(key("calls_v1", "root_z", generation=generation), batch, "sha256:z")
    assert store.rows("calls_v1", SCOPE_A, generation).equals(batch)
