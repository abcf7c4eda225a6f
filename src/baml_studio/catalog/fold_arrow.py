"""Rows (dicts) to Arrow tables with exactly a relation's schema, and concatenation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from baml_studio.catalog.schema import Relation

_SCHEMAS: dict[str, pa.Schema] = {}


def schema_of(relation: Relation) -> pa.Schema:
    """``relation.schema()``, built once per relation."""
    schema = _SCHEMAS.get(relation.name)
    if schema is None:
        schema = _SCHEMAS[relation.name] = relation.schema()
    return schema


def to_table(relation: Relation, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A table of ``rows``; a column a row does not mention is NULL."""
    schema = schema_of(relation)
    arrays = [pa.array([row.get(f.name) for row in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def concat(relation: Relation, tables: Iterable[pa.Table]) -> pa.Table:
    """One table, one chunk per column (an empty table if there is nothing)."""
    parts = [t for t in tables if t.num_rows]
    if not parts:
        return schema_of(relation).empty_table()
    if len(parts) == 1:
        return parts[0].combine_chunks()
    return pa.concat_tables(parts).combine_chunks()
