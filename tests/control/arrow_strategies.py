"""Hypothesis strategies for Arrow batches of a public relation's schema (every value its
column can hold: empty and quoting-hostile strings, both ends of ``DateTime64(9)``, nulls)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

NS_MIN = -2_208_988_800 * 10**9
"""1900-01-01T00:00:00Z, the first instant of ``DateTime64(9)``."""
NS_MAX = 2**63 - 1
"""2262-04-11T23:47:16.854775807Z, the last ns Arrow and ``DateTime64(9)`` share."""

texts = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20
) | st.sampled_from(["", "'", "\\", "''", "\\'", "\n", "é", "\U0001f600", "NULL", "\x00"])


def value(field: pa.Field) -> st.SearchStrategy[Any]:
    if pa.types.is_list(field.type):
        base: st.SearchStrategy[Any] = st.lists(texts, max_size=4)
    elif field.type == pa.string():
        base = texts
    elif field.type == pa.bool_():
        base = st.booleans()
    elif field.type == pa.uint32():
        base = st.integers(0, 2**32 - 1)
    elif field.type == pa.uint64():
        base = st.integers(0, 2**64 - 1)
    elif pa.types.is_timestamp(field.type):
        base = st.integers(NS_MIN, NS_MAX)
    else:
        raise AssertionError(field)
    return st.none() | base if field.nullable else base


@st.composite
def batches(draw: st.DrawFn, schema: pa.Schema) -> pa.Table:
    n = draw(st.integers(0, 12))
    columns = {f.name: draw(st.lists(value(f), min_size=n, max_size=n)) for f in schema}
    return pa.Table.from_pydict(
        {
            f.name: pa.array(columns[f.name], pa.int64()).cast(f.type)
            if pa.types.is_timestamp(f.type)
            else columns[f.name]
            for f in schema
        },
        schema=schema,
    )
