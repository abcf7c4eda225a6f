"""The public/private split of catalog v1 (DESIGN.md §5), derived from :mod:`.schema`.

:data:`CLASSIFICATION` is the one table: every column of every relation with its visibility.
Public columns may go to ClickHouse; private ones (value bodies, source locations, thread
names) stay in Lance, next to the relation's key columns so the halves join back.
:func:`split_table` cuts a folded table in two; :func:`join_split` puts it back together.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from baml_studio.catalog.fold_arrow import schema_of
from baml_studio.catalog.schema import RELATIONS, Relation, Visibility


@dataclass(frozen=True, slots=True)
class ColumnClass:
    relation: str
    column: str
    visibility: Visibility
    key: bool


CLASSIFICATION: tuple[ColumnClass, ...] = tuple(
    ColumnClass(r.name, c.name, c.visibility, c.key) for r in RELATIONS for c in r.columns
)
"""Every column of every relation, in catalog order, with its visibility."""


def key_columns(relation: Relation) -> list[str]:
    return [c.name for c in relation.columns if c.key]


_HALVES: dict[str, tuple[Relation, pa.Schema, pa.Schema]] = {}


def _halves(relation: Relation) -> tuple[Relation, pa.Schema, pa.Schema]:
    """The public and private schemas, built once per relation (checked by identity)."""
    found = _HALVES.get(relation.name)
    if found is None or found[0] is not relation:
        public = pa.schema([c.field() for c in relation.public_columns()])
        private = pa.schema(
            [c.field() for c in relation.columns if c.key or c.visibility is Visibility.PRIVATE]
        )
        found = _HALVES[relation.name] = (relation, public, private)
    return found


def public_schema(relation: Relation) -> pa.Schema:
    """The public columns, in relation order (keys are public)."""
    return _halves(relation)[1]


def private_schema(relation: Relation) -> pa.Schema:
    """The key columns, then the private columns, in relation order."""
    return _halves(relation)[2]


def split_table(relation: Relation, table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``(public, private)`` halves of a table with ``relation``'s schema (row for row)."""
    if table.schema != schema_of(relation):
        raise ValueError(f"table does not have the schema of {relation.name}")
    _, public, private = _halves(relation)
    return table.select(public.names), table.select(private.names)


def join_split(relation: Relation, public: pa.Table, private: pa.Table) -> pa.Table:
    """The table with ``relation``'s schema, public rows in their order, private columns
    matched on the key columns. A relation without private columns needs no match (its
    key is not always unique: ``health_v1`` repeats metrics per plane)."""
    private_names = [c.name for c in relation.private_columns()]
    if not private_names:
        return public.select([f.name for f in relation.schema()]).cast(relation.schema())
    keys = key_columns(relation)
    position = {
        key: row
        for row, key in enumerate(zip(*(private[k].to_pylist() for k in keys), strict=True))
    }
    try:
        indices = [
            position[key] for key in zip(*(public[k].to_pylist() for k in keys), strict=True)
        ]
    except KeyError as exc:
        raise ValueError(f"{relation.name}: no private row for key {exc.args[0]!r}") from None
    taken = private.take(pa.array(indices, pa.int64()))
    columns = [
        taken[f.name] if f.name in private_names else public[f.name] for f in relation.schema()
    ]
    return pa.Table.from_arrays(columns, schema=relation.schema())
