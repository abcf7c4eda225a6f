"""project_execution(s): determinism, ids, schemas, partitions, private rows, purity."""

from __future__ import annotations

import builtins
import dataclasses
import math
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from projector_fixtures import (
    SCOPE,
    assert_same,
    local_expected,
    meta_objects,
    reassemble,
    walk_bucket,
    walk_store,
    workload_bucket,
    workload_store,
)

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.fold_arrow import to_table
from baml_studio.catalog.fold_inputs import ExecutionInputs, MissingDataSegment
from baml_studio.catalog.schema import BY_NAME, FUNCTION_DEFINITIONS, HEALTH
from baml_studio.catalog.split import private_schema
from baml_studio.control.schemas import PUBLIC_RELATIONS, registered_schema
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import gather_root_ended
from baml_studio.projector.project import (
    PrivateRows,
    Projection,
    PublicBatch,
    _as_struct,
    _rows,
    batch_id,
    private_rows_schema,
    project_execution,
    project_executions,
)

__all__ = ["walk_bucket", "walk_store", "workload_bucket", "workload_store"]

Case = tuple[ExecutionInputs, list[dict[str, Any]]]


def cases(bucket: DirectoryBucket) -> list[Case]:
    reader = EvidenceReader(bucket, SCOPE)
    out = []
    for euid, seq in meta_objects(bucket):
        gathered = gather_root_ended(reader, euid, seq)
        for inputs in gathered.executions:
            out.append((inputs, gathered.definitions[inputs.meta.execution_id]))
    return out


@pytest.fixture(scope="module")
def workload_cases(workload_bucket: DirectoryBucket) -> list[Case]:
    found = cases(workload_bucket)
    assert len(found) == 30
    return found


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def fingerprint(projection: Projection) -> list[tuple[str, bytes]]:
    return [
        *((b.batch_id, ipc(b.table)) for b in projection.public),
        *((f"private:{p.relation}", ipc(p.table)) for p in projection.private),
    ]


# --- determinism ------------------------------------------------------------------------------


def test_running_twice_gives_byte_identical_output(
    workload_bucket: DirectoryBucket, workload_cases: list[Case]
) -> None:
    """Same inputs → same batches and rows, byte for byte; also through a fresh reader and
    gather (the whole processor run twice)."""
    again = {i.meta.execution_id: (i, d) for i, d in cases(workload_bucket)}
    for inputs, definitions in workload_cases:
        first = project_execution(inputs, definitions)
        second = project_execution(inputs, definitions)
        fresh_inputs, fresh_definitions = again[inputs.meta.execution_id]
        third = project_execution(fresh_inputs, fresh_definitions)
        assert fingerprint(first) == fingerprint(second) == fingerprint(third)
        assert first.value_cids == second.value_cids == third.value_cids


def test_the_core_does_no_io(monkeypatch: pytest.MonkeyPatch, workload_cases: list[Case]) -> None:
    inputs, definitions = max(workload_cases, key=lambda c: len(c[0].data.groups))
    expected = fingerprint(project_execution(inputs, definitions))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("project_execution did I/O")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert fingerprint(project_execution(inputs, definitions)) == expected


# --- ids, schemas, private rows ----------------------------------------------------------------


def test_ids_schemas_and_private_rows(workload_cases: list[Case]) -> None:
    for inputs, definitions in workload_cases:
        projection = project_execution(inputs, definitions)
        root_id = inputs.meta.execution_id
        assert projection.root_id == root_id
        relations = [b.relation for b in projection.public]
        order = [r.name for r in PUBLIC_RELATIONS]
        assert relations == sorted(relations, key=order.index)
        assert relations[0] == "threads_v1" and "health_v1" in relations
        for batch in projection.public:
            assert isinstance(batch, PublicBatch)
            assert batch.root_id == root_id and batch.partition == 0
            assert batch.batch_id == f"{root_id}.{batch.relation}.0"
            assert batch.table.schema.equals(registered_schema(batch.relation), check_metadata=True)
            assert all(f.metadata is None for f in batch.table.schema)
            assert batch.table.num_rows > 0
            assert all(c.num_chunks == 1 for c in batch.table.columns)
            if "execution_id" in batch.table.column_names:
                assert set(batch.table["execution_id"].to_pylist()) == {root_id}
        privates = {p.relation: p for p in projection.private}
        assert HEALTH.name not in privates
        for relation_name, rows in privates.items():
            assert isinstance(rows, PrivateRows)
            relation = BY_NAME[relation_name]
            assert relation.private_columns()
            assert rows.table.schema.equals(private_rows_schema(relation))
            names = rows.table.column_names
            assert names[:2] == ["row_id", "execution_id"]
            assert names[2:] == [n for n in private_schema(relation).names if n != "execution_id"]
            (batch,) = [b for b in projection.public if b.relation == relation_name]
            assert rows.table["row_id"].to_pylist() == [
                f"{batch.batch_id}:{i}" for i in range(batch.table.num_rows)
            ]
            assert set(rows.table["execution_id"].to_pylist()) == {root_id}
        assert {b.relation for b in projection.public if BY_NAME[b.relation].private_columns()} == (
            set(privates)
        )
    assert batch_id("r", "calls_v1", 3) == "r.calls_v1.3"


def test_function_definitions_travel_with_the_execution_given(workload_cases: list[Case]) -> None:
    for inputs, definitions in workload_cases:
        projection = project_execution(inputs, definitions)
        (batch,) = [b for b in projection.public if b.relation == FUNCTION_DEFINITIONS.name]
        assert batch.batch_id == f"{projection.root_id}.function_definitions_v1.0"
        assert batch.table.num_rows == len(definitions) > 0
        engine = inputs.meta.engine
        assert engine is not None
        assert set(batch.table["program_id"].to_pylist()) == {engine.program_id.hex()}
        (rows,) = [p for p in projection.private if p.relation == FUNCTION_DEFINITIONS.name]
        assert set(rows.table["execution_id"].to_pylist()) == {projection.root_id}
        assert rows.table["source_file"].null_count < rows.table.num_rows


def test_definitions_as_a_table_or_rows(workload_cases: list[Case]) -> None:
    inputs, definitions = workload_cases[0]
    table = to_table(FUNCTION_DEFINITIONS, definitions)
    assert fingerprint(project_execution(inputs, table)) == fingerprint(
        project_execution(inputs, definitions)
    )
    with pytest.raises(ValueError, match="function_definitions_v1"):
        project_execution(inputs, table.drop_columns(["fqn"]))
    with pytest.raises(ValueError, match="partition_rows"):
        project_execution(inputs, definitions, partition_rows=0)


def test_empty_relations_send_nothing(walk_store: Path, walk_bucket: DirectoryBucket) -> None:
    """A short root that succeeded has no errors: no errors_v1 batch nor private rows; and
    without definitions no function_definitions_v1 batch."""
    for inputs, definitions in cases(walk_bucket):
        projection = project_execution(inputs, [])
        relations = {b.relation for b in projection.public}
        assert "threads_v1" in relations and FUNCTION_DEFINITIONS.name not in relations
        tables = reassemble(projection)
        for relation in PUBLIC_RELATIONS:
            has_rows = tables[relation.name].num_rows > 0
            assert (relation.name in relations) is has_rows
            assert (relation.name in {p.relation for p in projection.private}) is (
                has_rows and bool(relation.private_columns())
            )
        assert definitions
    errors = [reassemble(project_execution(i, []))["errors_v1"] for i, _ in cases(walk_bucket)]
    assert any(t.num_rows == 0 for t in errors) and any(t.num_rows for t in errors)


# --- partitions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 7])
def test_partitions(n: int, workload_store: Path, workload_cases: list[Case]) -> None:
    source = LocalStoreSource(workload_store)
    for inputs, definitions in workload_cases[:6]:
        whole = project_execution(inputs, definitions)
        parts = project_execution(inputs, definitions, partition_rows=n)
        assert_same(reassemble(parts), local_expected(source, inputs.meta.execution_id), "parts")
        for relation in PUBLIC_RELATIONS:
            (full,) = [b.table for b in whole.public if b.relation == relation.name] or [None]
            batches = [b for b in parts.public if b.relation == relation.name]
            if full is None:
                assert not batches
                continue
            assert len(batches) == math.ceil(full.num_rows / n)
            assert [b.partition for b in batches] == list(range(len(batches)))
            assert all(0 < b.table.num_rows <= n for b in batches)
            assert pa.concat_tables([b.table for b in batches]).equals(full)
            for b in batches:
                assert b.batch_id == batch_id(whole.root_id, relation.name, b.partition)
            rows = [p.table for p in parts.private if p.relation == relation.name]
            if rows:
                assert rows[0]["row_id"].to_pylist() == [
                    f"{b.batch_id}:{i}" for b in batches for i in range(b.table.num_rows)
                ]
                assert len(set(rows[0]["row_id"].to_pylist())) == full.num_rows


# --- many executions at once -------------------------------------------------------------------


def private_values(projection: Projection) -> list[tuple[str, Any, list[dict[str, Any]]]]:
    return [(p.relation, p.table.schema, p.table.to_pylist()) for p in projection.private]


@pytest.mark.parametrize("n", [50_000, 3])
def test_many_executions_at_once_give_each_one_alone(
    n: int, workload_cases: list[Case], walk_bucket: DirectoryBucket
) -> None:
    """``project_executions`` converts and cuts a slice's rows once per relation; every
    execution still gets the batches (ids and IPC bytes, hence digests) and private rows it
    gets alone: with and without definitions, as rows or a table, a data gap (index_corrupt)
    in the middle of the slice, several partitions, executions with no errors beside ones
    with errors."""
    items: list[tuple[ExecutionInputs, Any]] = list(workload_cases)
    items += [(inputs, []) for inputs, _ in cases(walk_bucket)]
    inputs, definitions = items[3]
    items[3] = (inputs, to_table(FUNCTION_DEFINITIONS, definitions))
    inputs, definitions = items[7]
    assert inputs.meta.ended is not None
    gap = dataclasses.replace(
        inputs.data,
        issues=(*inputs.data.issues, MissingDataSegment(inputs.meta.ended.data_first_seq)),
    )
    items[7] = (dataclasses.replace(inputs, data=gap), definitions)
    together = project_executions(items, partition_rows=n)
    alone = [project_execution(i, d, partition_rows=n) for i, d in items]
    assert [p.root_id for p in together] == [i.meta.execution_id for i, _ in items]
    for one, many in zip(alone, together, strict=True):
        assert fingerprint_public(many) == fingerprint_public(one)
        assert private_values(many) == private_values(one)
        assert many.value_cids == one.value_cids
    threads = reassemble(together[7])["threads_v1"]
    assert "index_corrupt" in threads["index_state"].to_pylist()
    assert "index_corrupt" not in reassemble(together[6])["threads_v1"]["index_state"].to_pylist()
    assert project_executions([]) == []
    with pytest.raises(ValueError, match="partition_rows"):
        project_executions(items, partition_rows=0)


def fingerprint_public(projection: Projection) -> list[tuple[str, bytes]]:
    return [(b.batch_id, ipc(b.table)) for b in projection.public]


def _values(field: pa.Field, n: int) -> st.SearchStrategy[list[Any]]:
    kind = field.type
    one: st.SearchStrategy[Any]
    if pa.types.is_string(kind):
        one = st.text(max_size=12)
    elif pa.types.is_list(kind):
        one = st.lists(st.text(max_size=6), max_size=4)
    elif pa.types.is_boolean(kind):
        one = st.booleans()
    elif pa.types.is_timestamp(kind):
        one = st.integers(0, 2**62)
    else:
        one = st.integers(0, 2 ** (kind.bit_width - 1))
    if field.nullable:
        one = st.none() | one
    return st.lists(one, min_size=n, max_size=n)


@st.composite
def _table_and_span(draw: st.DrawFn) -> tuple[pa.Table, int, int]:
    relation = draw(st.sampled_from(PUBLIC_RELATIONS))
    schema = registered_schema(relation.name)
    n = draw(st.integers(2, 40))
    columns = [pa.array(draw(_values(field, n)), field.type) for field in schema]
    start = draw(st.integers(0, n - 1))
    length = draw(st.integers(1, n - start))
    return pa.Table.from_arrays(columns, schema=schema), start, length


@settings(max_examples=150, deadline=None)
@given(_table_and_span())
def test_an_execution_s_rows_have_the_bytes_a_take_gives(case: tuple[pa.Table, int, int]) -> None:
    """Cutting one execution's rows out of a slice's table gives the IPC bytes (schema,
    buffers, padding, validity bits) of a ``take`` of those rows: what the execution's own
    table has, so its batch digests do not depend on what it was projected with."""
    table, start, length = case
    cut = _rows(table, _as_struct(table), start, length)
    assert ipc(cut) == ipc(table.take(pa.array(range(start, start + length), pa.int64())))
