"""The DataFusion session of one query: catalog ``baml``, schema ``public``.

Every catalog relation is registered under its versioned name, with its aliases as views; the
relations the query reads carry their folded rows, the others are empty (so ``SHOW TABLES`` and
``information_schema`` still list them without folding anything). Internal relations exist only
with ``internal=True``. Also registered: the catalog views, ``baml_columns`` and the query's UDFs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
from datafusion import DataFrame, ScalarUDF, SessionConfig, SessionContext, SQLOptions

from baml_studio.catalog.schema import VIEWS, Relation
from baml_studio.query.errors import InternalQueryError
from baml_studio.query.names import BAML_COLUMNS, relations
from baml_studio.query.schema_doc import baml_columns_table

BATCH_ROWS = 8192


def read_only() -> SQLOptions:
    return SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


def build_session(
    data: Mapping[str, pa.Table], *, internal: bool, functions: Sequence[ScalarUDF]
) -> SessionContext:
    config = (
        SessionConfig()
        .with_information_schema(True)
        .with_create_default_catalog_and_schema(True)
        .with_default_catalog_and_schema("baml", "public")
        .with_batch_size(BATCH_ROWS)
        # One partition: the value UDFs serialize on the GIL anyway, rows then stream in scan
        # order as the consumer pulls them, and no background task is left calling Python
        # after a consumer stops early.
        .with_target_partitions(1)
    )
    ctx = SessionContext(config)
    for relation in relations(internal):
        ctx.register_record_batches(relation.name, [_batches(relation, data.get(relation.name))])
        for alias in relation.aliases:
            ctx.register_view(alias, ctx.table(relation.name))
    for view in VIEWS:
        ctx.register_view(view.name, sql(ctx, view.sql))
        ctx.register_view(view.alias, ctx.table(view.name))
    ctx.register_record_batches(BAML_COLUMNS, [baml_columns_table(internal).to_batches()])
    for function in functions:
        ctx.register_udf(function)
    return ctx


def sql(ctx: SessionContext, text: str) -> DataFrame:
    """Plan ``text`` read-only (no DDL, DML or SET even if the gatekeeper missed one)."""
    return ctx.sql_with_options(text, read_only())


def _batches(relation: Relation, table: pa.Table | None) -> list[pa.RecordBatch]:
    schema = relation.schema()
    if table is None:
        return [pa.RecordBatch.from_pylist([], schema=schema)]
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise InternalQueryError(
            f"the catalog source served {relation.name} without columns {missing}",
            "this is a bug in the catalog source; report it",
        )
    try:
        table = table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise InternalQueryError(
            f"the catalog source served {relation.name} with the wrong types: {exc}",
            "this is a bug in the catalog source; report it",
        ) from exc
    batches = table.to_batches(max_chunksize=BATCH_ROWS)
    return batches or [pa.RecordBatch.from_pylist([], schema=schema)]
