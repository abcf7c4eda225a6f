"""The public/private split: one classification, derived schemas, lossless split and join."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from catalog_helpers import ALL_RELATIONS, ipc_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.catalog import (
    CLASSIFICATION,
    LocalStoreSource,
    join_split,
    private_schema,
    public_schema,
    split_table,
)
from baml_studio.catalog.fold_arrow import to_table
from baml_studio.catalog.schema import BY_NAME, PRIVATE, PUBLIC, RELATIONS, Relation

PRIVATE_NAME = re.compile(
    r"(call|spawn|throw)_site_\w+|source_(file|start|end)|name"
    r"|args|output|error|value"
)
VALUE_BODIES = {("calls_v1", "args"), ("calls_v1", "output"), ("calls_v1", "error"),
                ("errors_v1", "value")}  # fmt: skip


def test_every_column_of_every_relation_is_classified_once() -> None:
    classified = [(c.relation, c.column) for c in CLASSIFICATION]
    assert len(classified) == len(set(classified))
    assert classified == [(r.name, c.name) for r in RELATIONS for c in r.columns]
    assert {c.visibility for c in CLASSIFICATION} == {PUBLIC, PRIVATE}


def test_private_columns_are_value_bodies_source_locations_and_thread_names() -> None:
    private = {(c.relation, c.column) for c in CLASSIFICATION if c.visibility is PRIVATE}
    for relation, column in private:
        assert PRIVATE_NAME.fullmatch(column), (relation, column)
        assert column != "name" or relation == "threads_v1"
    assert private >= VALUE_BODIES
    assert ("threads_v1", "name") in private
    for c in CLASSIFICATION:
        if c.visibility is PUBLIC:
            # public look-alikes: CIDs, states and ids of values, never bodies or locations
            assert not re.fullmatch(r"(call|spawn|throw)_site_\w+|source_(file|start|end)",
                                    c.column), c  # fmt: skip
            assert (c.relation, c.column) not in VALUE_BODIES
    virtual = {(r.name, col.name) for r in RELATIONS for col in r.columns if col.virtual}
    assert virtual == VALUE_BODIES


@pytest.mark.parametrize("relation", RELATIONS, ids=lambda r: r.name)
def test_derived_schemas(relation) -> None:  # type: ignore[no-untyped-def]
    public, private = public_schema(relation), private_schema(relation)
    keys = [c.name for c in relation.columns if c.key]
    assert keys and all(k in public.names and k in private.names for k in keys)
    assert set(public.names) | set(private.names) == set(relation.schema().names)
    assert set(public.names) & set(private.names) == set(keys)
    for field in (*public, *private):
        assert field.equals(relation.schema().field(field.name), check_metadata=True)


def test_split_then_join_gives_back_every_table(mixed_store: Path) -> None:
    tables = LocalStoreSource(mixed_store).tables(ALL_RELATIONS, None)
    for name, table in tables.items():
        relation = BY_NAME[name]
        public, private = split_table(relation, table)
        assert public.schema == public_schema(relation)
        assert private.schema == private_schema(relation)
        assert public.num_rows == private.num_rows == table.num_rows
        joined = join_split(relation, public, private)
        assert ipc_bytes(joined) == ipc_bytes(table), name
        shuffled = private.take(list(reversed(range(private.num_rows))))
        assert ipc_bytes(join_split(relation, public, shuffled)) == ipc_bytes(table), name


def test_split_refuses_a_foreign_table_and_join_a_missing_key(mixed_store: Path) -> None:
    tables = LocalStoreSource(mixed_store).tables(["calls_v1", "threads_v1"], None)
    with pytest.raises(ValueError, match="schema of threads_v1"):
        split_table(BY_NAME["threads_v1"], tables["calls_v1"])
    public, private = split_table(BY_NAME["calls_v1"], tables["calls_v1"])
    with pytest.raises(ValueError, match="no private row"):
        join_split(BY_NAME["calls_v1"], public, private.slice(1))


# --- to_table: one struct conversion, the same arrays as one conversion per column ------------


def _per_column(relation: Relation, rows: list[dict[str, Any]]) -> pa.Table:
    """The reference: one ``pa.array`` per column (what ``to_table`` did before)."""
    schema = relation.schema()
    arrays = [pa.array([row.get(f.name) for row in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _value(field: pa.Field) -> st.SearchStrategy[Any]:
    kind = field.type
    if pa.types.is_string(kind):
        plain: st.SearchStrategy[Any] = st.text(max_size=8)
    elif pa.types.is_binary(kind):
        plain = st.binary(max_size=8)
    elif pa.types.is_boolean(kind):
        plain = st.booleans()
    elif pa.types.is_timestamp(kind):
        plain = st.integers(min_value=0, max_value=(1 << 62))
    elif pa.types.is_list(kind):
        plain = st.lists(st.text(max_size=4), max_size=3)
    else:
        plain = st.integers(min_value=0, max_value=(1 << (kind.bit_width)) - 1)
    return st.one_of(st.none(), plain)


@st.composite
def _rows(draw: st.DrawFn) -> tuple[Relation, list[dict[str, Any]]]:
    relation = draw(st.sampled_from(RELATIONS))
    fields = list(relation.schema())
    rows = []
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        present = draw(st.lists(st.sampled_from(fields), unique_by=lambda f: f.name))
        rows.append({f.name: draw(_value(f)) for f in present})
    return relation, rows


@settings(max_examples=300, deadline=None)
@given(_rows())
def test_to_table_gives_the_per_column_arrays_byte_for_byte(case) -> None:
    """Batch digests are SHA-256 of the IPC bytes: the conversion must not change them."""
    relation, rows = case
    got, expected = to_table(relation, rows), _per_column(relation, rows)
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert ipc_bytes(got) == ipc_bytes(expected)
    assert [c.num_chunks for c in got.columns] == [1] * got.num_columns
