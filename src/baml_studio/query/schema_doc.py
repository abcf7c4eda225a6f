"""The catalog as data: ``baml_columns`` rows and the ``--schema`` document (§5.5, §5.8)."""

from __future__ import annotations

import pyarrow as pa

from baml_studio.catalog.schema import CATALOG_VERSION, VIEWS
from baml_studio.catalog.source import Snapshot
from baml_studio.query.names import relations

BAML_COLUMNS_SCHEMA = pa.schema(
    [
        pa.field("relation", pa.string(), nullable=False),
        pa.field("column", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("nullable", pa.bool_(), nullable=False),
        pa.field("virtual", pa.bool_(), nullable=False),
        pa.field("role", pa.string(), nullable=True),
        pa.field("doc", pa.string(), nullable=False),
    ]
)

_NAMES = {
    pa.string(): "Utf8",
    pa.uint32(): "UInt32",
    pa.uint64(): "UInt64",
    pa.bool_(): "Boolean",
    pa.binary(): "Binary",
}


def type_name(t: pa.DataType) -> str:
    """The reference spelling of an Arrow type (``Utf8``, ``List<Utf8>``, …)."""
    if t in _NAMES:
        return _NAMES[t]
    if pa.types.is_timestamp(t):
        unit = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}
        tz = f'Some("{t.tz}")' if t.tz else "None"
        return f"Timestamp({unit[t.unit]}, {tz})"
    if pa.types.is_list(t):
        return f"List<{type_name(t.value_type)}>"
    return str(t)


def baml_columns_table(internal: bool) -> pa.Table:
    rows = [
        {
            "relation": relation.name,
            "column": column.name,
            "type": type_name(column.type),
            "nullable": column.nullable,
            "virtual": column.virtual,
            "role": column.role,
            "doc": column.doc,
        }
        for relation in relations(internal)
        for column in relation.columns
    ]
    return pa.Table.from_pylist(rows, schema=BAML_COLUMNS_SCHEMA)


def schema_document(snapshot: Snapshot, internal: bool) -> dict[str, object]:
    """``{catalogVersion, generation, relations: [...], views: [...]}``."""
    return {
        "catalogVersion": snapshot.catalog_version or CATALOG_VERSION,
        "generation": snapshot.generation,
        "relations": [
            {
                "name": relation.name,
                "alias": relation.alias,
                "grain": relation.grain,
                # Internal relations describe the store's files; their shape may change.
                "provisional": relation.internal,
                "doc": relation.doc,
                "columns": [
                    {
                        "name": column.name,
                        "type": type_name(column.type),
                        "nullable": column.nullable,
                        "key": column.key,
                        "virtual": column.virtual,
                        "role": column.role,
                        "doc": column.doc,
                    }
                    for column in relation.columns
                ],
            }
            for relation in relations(internal)
        ],
        "views": [
            {"name": view.name, "alias": view.alias, "sql": view.sql, "doc": view.doc}
            for view in VIEWS
        ],
    }
