"""The public/private split: one classification, derived schemas, lossless split and join."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from catalog_helpers import ALL_RELATIONS, ipc_bytes

from baml_studio.catalog import (
    CLASSIFICATION,
    LocalStoreSource,
    join_split,
    private_schema,
    public_schema,
    split_table,
)
from baml_studio.catalog.schema import BY_NAME, PRIVATE, PUBLIC, RELATIONS

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
