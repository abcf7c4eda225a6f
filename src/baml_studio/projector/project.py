"""One execution's public batches and private rows. Pure: no I/O, no clock, no randomness.

:func:`project_execution` folds the execution (:func:`baml_studio.catalog.fold.fold_rows`,
the rows of ``fold_execution``), adds its engine's ``function_definitions_v1`` rows, and cuts
every public relation in two with :func:`baml_studio.catalog.split.split_table`;
:func:`project_executions` does the same for a slice of executions at once. Ids
(``docs/projector.md``, system contract "Idempotency"):

* ``root_id`` — the execution id (the root thread's wire id);
* ``batch_id = f"{root_id}.{relation}.{partition}"``; partition ``p`` holds rows
  ``[p*n, (p+1)*n)`` of the relation in fold order, ``n = partition_rows``;
* a fact's row id ``f"{batch_id}:{position}"``, ``position`` counted from 0 within its batch.

Public batches come in relation order (``threads_v1``, ``call_path_stats_v1``, ``calls_v1``,
``errors_v1``, ``function_definitions_v1``, ``health_v1``), then by partition; each table has
exactly ``registered_schema(relation)`` and one chunk per column. A relation with no rows
sends no batch (there is nothing to make visible, and the same inputs always give the same
batches, so a retry can never leave an empty batch behind). Every execution has a root row,
so ``threads_v1`` always has a batch.

Private rows: for each relation with private columns and at least one row, one table holding
``row_id``, ``execution_id`` (the root id; for ``function_definitions_v1``, whose rows have no
execution, the root id of the execution they travel with) and the relation's
``private_schema`` columns (keys, then private columns), row for row with the public batches.
Value columns hold the value handles of :mod:`baml_studio.catalog.handles`. ``health_v1`` has
no private column and no private rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from baml_studio.catalog.fold import fold_rows
from baml_studio.catalog.fold_arrow import concat, schema_of, to_table
from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    ExecutionInputs,
    MissingDataSegment,
)
from baml_studio.catalog.handles import Available, decode_handle
from baml_studio.catalog.schema import (
    BY_NAME,
    CALLS,
    ERRORS,
    FUNCTION_DEFINITIONS,
    THREADS,
    Relation,
)
from baml_studio.catalog.split import private_schema, split_table
from baml_studio.control.schemas import PUBLIC_RELATIONS, batch_id, registered_schema
from baml_studio.format.cas import CODEC_VALUE

DEFAULT_PARTITION_ROWS = 50_000
ROW_ID = pa.field("row_id", pa.string(), nullable=False)
EXECUTION_ID = pa.field("execution_id", pa.string(), nullable=False)
VALUE_COLUMNS: dict[str, tuple[str, ...]] = {
    CALLS.name: ("args", "output", "error"),
    ERRORS.name: ("value",),
}
"""The virtual value columns (handles) of each relation."""


@dataclass(frozen=True, slots=True)
class PublicBatch:
    """One ``PUT /projection-batches/{batch_id}``: at most ``partition_rows`` public rows."""

    relation: str
    partition: int
    batch_id: str
    root_id: str
    table: pa.Table
    """Exactly ``registered_schema(relation)``; rows in fold order."""


@dataclass(frozen=True, slots=True)
class PrivateRows:
    """The private half of one relation of one execution, row for row with its batches."""

    relation: str
    table: pa.Table
    """``row_id``, ``execution_id``, then the relation's ``private_schema`` columns."""


@dataclass(frozen=True, slots=True)
class Projection:
    root_id: str
    public: tuple[PublicBatch, ...]
    private: tuple[PrivateRows, ...]
    value_cids: frozenset[bytes]
    """CIDs of the codec-1 values the rows hold as available handles: they must be in
    ``values_v1`` before the execution is projected."""


def row_id(batch: str, position: int) -> str:
    return f"{batch}:{position}"


def private_rows_schema(relation: Relation) -> pa.Schema:
    """``row_id``, ``execution_id``, then ``private_schema(relation)`` (which already starts
    with ``execution_id`` for the per-execution relations)."""
    fields = list(private_schema(relation))
    if "execution_id" not in (f.name for f in fields):
        fields.insert(0, EXECUTION_ID)
    return pa.schema([ROW_ID, *fields])


def project_execution(
    inputs: ExecutionInputs,
    definitions: Sequence[Mapping[str, Any]] | pa.Table,
    *,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
) -> Projection:
    """The public batches and private rows of one execution; ``definitions`` are the
    ``function_definitions_v1`` rows of its engine (dicts, or a table with that relation's
    schema). Raises ``ValueError`` for ``partition_rows < 1`` or a definitions table with
    another schema."""
    return project_executions([(inputs, definitions)], partition_rows=partition_rows)[0]


def project_executions(
    items: Sequence[tuple[ExecutionInputs, Sequence[Mapping[str, Any]] | pa.Table]],
    *,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
) -> list[Projection]:
    """:func:`project_execution` of each ``(inputs, definitions)``, in order, with the same
    batches, ids and rows as one at a time. The executions' rows are converted to Arrow,
    split and cut once per relation for all of them (each step has a fixed cost that one
    execution's handful of rows would pay six times over); each execution's batches get its
    rows in buffers of their own (:func:`_rows`), its private rows are zero-copy slices."""
    if partition_rows < 1:
        raise ValueError(f"partition_rows must be at least 1, got {partition_rows}")
    root_ids = [inputs.meta.execution_id for inputs, _ in items]
    tables, spans = _fold_all(items)
    value_cids = _value_cids_all(tables, spans)
    public: list[list[PublicBatch]] = [[] for _ in items]
    private: list[list[PrivateRows]] = [[] for _ in items]
    for relation in PUBLIC_RELATIONS:
        table = tables[relation.name]
        if table.num_rows == 0:
            continue
        public_half, private_half = split_table(relation, table)
        schema = registered_schema(relation.name)
        exact = pa.Table.from_arrays(public_half.columns, schema=schema)
        whole = _as_struct(exact)
        ids: list[str] = []
        for k, (start, length) in enumerate(spans[relation.name]):
            if length == 0:
                continue
            batches = _partitions(
                root_ids[k], relation.name, _rows(exact, whole, start, length), n=partition_rows
            )
            public[k].extend(batches)
            ids.extend(row_id(b.batch_id, i) for b in batches for i in range(b.table.num_rows))
        if relation.private_columns():
            rows = _private(relation, root_ids, spans[relation.name], ids, private_half)
            for k, (start, length) in enumerate(spans[relation.name]):
                if length:
                    private[k].append(PrivateRows(relation.name, rows.slice(start, length)))
    return [
        Projection(root_ids[k], tuple(public[k]), tuple(private[k]), value_cids[k])
        for k in range(len(items))
    ]


Span = tuple[int, int]
"""``(start, length)`` of one execution's rows in a relation's table."""


def _as_struct(table: pa.Table) -> pa.StructArray:
    """``table``'s columns as one struct array (no copy), for :func:`_rows` to cut."""
    return pa.StructArray.from_arrays(
        [column.combine_chunks() for column in table.columns], fields=list(table.schema)
    )


def _rows(table: pa.Table, whole: pa.StructArray, start: int, length: int) -> pa.Table:
    """Rows ``[start, start + length)`` of ``table`` (``whole``: the same columns as one
    struct array) in buffers of their own. A batch's bytes must not depend on the executions
    projected with it: the IPC writer writes a zero-copy slice's string data up to the end of
    the shared buffer and its validity bits as they lie, so a slice would not give the bytes
    (nor the digest) of the execution projected alone. Concatenating the struct slice copies
    every column into fresh buffers in one call, the bytes a ``take`` gives (property-tested)
    at half its cost (a ``take`` dispatches a kernel per column)."""
    if start == 0 and length == table.num_rows:
        return table
    part = pa.concat_arrays([whole.slice(start, length)])
    return pa.Table.from_struct_array(part).replace_schema_metadata(table.schema.metadata)


def _fold_all(
    items: Sequence[tuple[ExecutionInputs, Sequence[Mapping[str, Any]] | pa.Table]],
) -> tuple[dict[str, pa.Table], dict[str, list[Span]]]:
    """Every public relation's rows of all ``items`` as one table each (one chunk per
    column), and each execution's span in it."""
    rows: dict[str, list[dict[str, Any]]] = {}
    spans: dict[str, list[Span]] = {}
    gaps = []
    for inputs, _ in items:
        for name, part in fold_rows(inputs).items():
            found = rows.setdefault(name, [])
            spans.setdefault(name, []).append((len(found), len(part)))
            found.extend(part)
        if _data_gap(inputs):
            gaps.append(inputs.meta.execution_id)
    tables = {name: to_table(BY_NAME[name], part) for name, part in rows.items()}
    if gaps:
        tables[THREADS.name] = _mark_index_corrupt(tables[THREADS.name], gaps)
    tables[FUNCTION_DEFINITIONS.name], spans[FUNCTION_DEFINITIONS.name] = _definitions_all(
        [definitions for _, definitions in items]
    )
    for relation in PUBLIC_RELATIONS:  # none folded (no executions)
        if relation.name not in tables:
            tables[relation.name] = schema_of(relation).empty_table()
            spans[relation.name] = [(0, 0)] * len(items)
    return tables, spans


def _definitions_all(
    each: Sequence[Sequence[Mapping[str, Any]] | pa.Table],
) -> tuple[pa.Table, list[Span]]:
    """The ``function_definitions_v1`` rows each execution carries, as one table."""
    spans: list[Span] = []
    if any(isinstance(definitions, pa.Table) for definitions in each):
        parts = [_definitions_table(definitions) for definitions in each]
        start = 0
        for part in parts:
            spans.append((start, part.num_rows))
            start += part.num_rows
        return concat(FUNCTION_DEFINITIONS, parts), spans
    rows: list[Mapping[str, Any]] = []
    for definitions in each:
        spans.append((len(rows), len(definitions)))
        rows.extend(definitions)
    return to_table(FUNCTION_DEFINITIONS, rows), spans


def _data_gap(inputs: ExecutionInputs) -> bool:
    """A data object of the execution's range is absent from the bucket or fails its checksum
    (the publisher skipped a local file that failed verification): a sequence gap."""
    return any(
        isinstance(issue, MissingDataSegment | CorruptDataSegment) for issue in inputs.data.issues
    )


def _mark_index_corrupt(threads: pa.Table, root_ids: Sequence[str]) -> pa.Table:
    """The root thread rows of ``root_ids`` say ``index_corrupt``: the contract marks every
    execution whose data range crosses a gap in the bucket so (the local catalog keeps
    ``index_state`` for the meta plane and reports the data issue in ``health_v1`` only; both
    are projected)."""
    index = threads.schema.get_field_index("index_state")
    root = pc.is_in(threads.column("thread_id"), pa.array(root_ids, pa.string()))
    states = pc.if_else(root, pa.scalar("index_corrupt", pa.string()), threads.column(index))
    return threads.set_column(index, threads.schema.field(index), states)


def _definitions_table(definitions: Sequence[Mapping[str, Any]] | pa.Table) -> pa.Table:
    if isinstance(definitions, pa.Table):
        if not definitions.schema.equals(FUNCTION_DEFINITIONS.schema(), check_metadata=False):
            raise ValueError(
                f"definitions must have the {FUNCTION_DEFINITIONS.name} schema "
                f"{FUNCTION_DEFINITIONS.schema()}, got {definitions.schema}"
            )
        return definitions.cast(FUNCTION_DEFINITIONS.schema())
    return to_table(FUNCTION_DEFINITIONS, definitions)


def _partitions(root_id: str, relation: str, exact: pa.Table, *, n: int) -> list[PublicBatch]:
    """One execution's rows of a relation (``exact``: the registered schema, one chunk per
    column) cut into batches of at most ``n`` rows."""
    if exact.num_rows <= n:  # one partition: the table itself
        return [PublicBatch(relation, 0, batch_id(root_id, relation, 0), root_id, exact)]
    out = []
    for partition, start in enumerate(range(0, exact.num_rows, n)):
        part = exact.slice(start, n).combine_chunks()
        out.append(
            PublicBatch(relation, partition, batch_id(root_id, relation, partition), root_id, part)
        )
    return out


def _private(
    relation: Relation,
    root_ids: Sequence[str],
    spans: Sequence[Span],
    ids: list[str],
    half: pa.Table,
) -> pa.Table:
    """``row_id``, ``execution_id`` and the private half, row for row; ``execution_id`` is
    the root id each row travels with when the relation has no such column."""
    schema = private_rows_schema(relation)
    columns = {name: half[name] for name in half.column_names}
    columns["row_id"] = pa.chunked_array([pa.array(ids, pa.string())])
    if "execution_id" not in columns:
        owners = [
            root for root, (_, length) in zip(root_ids, spans, strict=True) for _ in range(length)
        ]
        columns["execution_id"] = pa.chunked_array([pa.array(owners, pa.string())])
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema).combine_chunks()


def _value_cids_all(
    tables: Mapping[str, pa.Table], spans: Mapping[str, Sequence[Span]]
) -> list[frozenset[bytes]]:
    """Per execution, the codec-1 values its value columns hold as available handles."""
    cids: list[set[bytes]] = [set() for _ in spans[THREADS.name]]
    for name, columns in VALUE_COLUMNS.items():
        for column in columns:
            handles = tables[name][column].to_pylist()
            for k, (start, length) in enumerate(spans[name]):
                cids[k].update(_available(handles[start : start + length]))
    return [frozenset(found) for found in cids]


def _available(handles: Iterable[bytes | None]) -> Iterable[bytes]:
    for raw in handles:
        if raw is None:
            continue
        handle = decode_handle(raw)
        if isinstance(handle, Available) and handle.codec == CODEC_VALUE:
            yield handle.cid


__all__ = [
    "DEFAULT_PARTITION_ROWS",
    "PrivateRows",
    "Projection",
    "PublicBatch",
    "batch_id",
    "private_rows_schema",
    "project_execution",
    "project_executions",
    "row_id",
]
