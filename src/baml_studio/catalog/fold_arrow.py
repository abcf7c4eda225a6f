"""Rows (dicts) to Arrow tables with exactly a relation's schema, and concatenation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from baml_studio.catalog.schema import Relation

_SCHEMAS: dict[str, tuple[Relation, pa.Schema, pa.StructType]] = {}


def _built(relation: Relation) -> tuple[Relation, pa.Schema, pa.StructType]:
    """The relation's schema and row type, built once per relation (checked by identity, so
    another relation of the same name never gets this one's)."""
    found = _SCHEMAS.get(relation.name)
    if found is None or found[0] is not relation:
        schema = relation.schema()
        found = _SCHEMAS[relation.name] = (relation, schema, pa.struct(list(schema)))
    return found


def schema_of(relation: Relation) -> pa.Schema:
    """``relation.schema()``, built once per relation."""
    return _built(relation)[1]


def to_table(relation: Relation, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A table of ``rows``; a column a row does not mention is NULL (and a key no column
    names is ignored). The rows are converted in one call, as one struct array whose
    children become the columns: half the time of one conversion per column, and the same
    arrays (the same IPC bytes, which batch digests rely on)."""
    return pa.Table.from_struct_array(pa.array(rows, type=_built(relation)[2]))


def concat(relation: Relation, tables: Iterable[pa.Table]) -> pa.Table:
    """One table, one chunk per column (an empty table if there is nothing)."""
    parts = [t for t in tables if t.num_rows]
    if not parts:
        return schema_of(relation).empty_table()
    if len(parts) == 1:
        return parts[0].combine_chunks()
    return pa.concat_tables(parts).combine_chunks()
