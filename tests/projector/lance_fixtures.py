"""Helpers for the Lance private-store and value-path tests: values, entries, private rows,
and hypothesis strategies for codec-1 values (a copy: helper modules of other test packages
are not importable from here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from baml_studio.catalog.handles import Available, encode_handle
from baml_studio.format.cas import CODEC_VALUE
from baml_studio.format.ids import value_cid, value_cid_wire
from baml_studio.format.values import (
    NULL,
    BigInt,
    Bool,
    Bytes,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
    encode_value,
    from_json,
)
from baml_studio.format.values.model import I64_MAX, I64_MIN, MEDIA_SOURCES
from baml_studio.format.values.wire import OMITTED_CLASS
from baml_studio.projector.lance_store import PrivateStore, relation_schema

Entry = tuple[str, int, bytes, str]


def entry(value: Value | Any, locator: str = "pack#0", codec: int = CODEC_VALUE) -> Entry:
    """An ingest entry for ``value`` (a :data:`Value`, or a JSON-able object)."""
    if not isinstance(value, Value):  # type: ignore[arg-type]  # reason: a union alias
        value = from_json(value)
    body = encode_value(value)
    return value_cid_wire(value_cid(codec, body)), codec, body, locator


def raw_entry(body: bytes, codec: int, locator: str = "pack#0") -> Entry:
    return value_cid_wire(value_cid(codec, body)), codec, body, locator


def invoice(n: int) -> Entry:
    """A small invoice value whose ``$.invoice.id`` is ``INV-<n>``."""
    return entry(
        {
            "invoice": {"id": f"INV-{n}", "total": n + 0.5, "paid": n % 2 == 0},
            "items": [{"sku": f"SKU-{n}-{i}", "qty": i} for i in range(2)],
        },
        locator=f"pack#{n}",
    )


def cid_bytes(cid: str) -> bytes:
    return bytes.fromhex(cid.removeprefix("bamlv_1_"))


def calls_rows(execution_id: str, n: int, cids: list[str], *, tag: str = "") -> pa.Table:
    """``n`` private ``calls_v1`` rows; the args handles point at ``cids`` in turn."""
    handles = [
        encode_handle(Available(CODEC_VALUE, cid_bytes(cids[i % len(cids)]))) for i in range(n)
    ]
    return pa.table(
        {
            "row_id": [f"{execution_id}.calls_v1.0:{i}" for i in range(n)],
            "execution_id": [execution_id] * n,
            "call_id": [f"call-{i}" for i in range(n)],
            "call_site_file": [f"src/{tag}main.baml"] * n,
            "call_site_line": pa.array([i + 1 for i in range(n)], pa.uint32()),
            "call_site_start": pa.array([i * 10 for i in range(n)], pa.uint32()),
            "call_site_end": pa.array([i * 10 + 5 for i in range(n)], pa.uint32()),
            "args": pa.array(handles, pa.binary()),
            "output": pa.array([None] * n, pa.binary()),
            "error": pa.array([None] * n, pa.binary()),
        }
    )


def threads_rows(execution_id: str, n: int) -> pa.Table:
    return pa.table(
        {
            "row_id": [f"{execution_id}.threads_v1.0:{i}" for i in range(n)],
            "execution_id": [execution_id] * n,
            "thread_id": [execution_id if i == 0 else f"{execution_id}/t{i}" for i in range(n)],
            "spawn_site_file": [None] + ["src/main.baml"] * (n - 1),
            "spawn_site_line": pa.array([None] + [7] * (n - 1), pa.uint32()),
            "name": [None] + [f"worker {i}" for i in range(1, n)],
        }
    )


def definitions_rows(execution_id: str, n: int) -> pa.Table:
    """``function_definitions_v1`` rows: no ``execution_id`` column (the store adds it)."""
    return pa.table(
        {
            "row_id": [f"{execution_id}.function_definitions_v1.0:{i}" for i in range(n)],
            "program_id": ["prog-1"] * n,
            "function_id": pa.array(list(range(n)), pa.uint32()),
            "source_file": ["src/main.baml"] * n,
            "source_start": pa.array([i * 100 for i in range(n)], pa.uint32()),
            "source_end": pa.array([i * 100 + 50 for i in range(n)], pa.uint32()),
        }
    )


def execution_private(execution_id: str, cids: list[str]) -> list[tuple[str, pa.Table]]:
    return [
        ("threads_v1", threads_rows(execution_id, 3)),
        ("calls_v1", calls_rows(execution_id, 5, cids)),
        ("function_definitions_v1", definitions_rows(execution_id, 2)),
    ]


def sorted_rows(table: pa.Table, relation: str) -> list[dict[str, Any]]:
    """Rows in row_id order with the dataset's column order (to compare two reads)."""
    names = relation_schema(relation).names
    return table.select(names).sort_by("row_id").to_pylist()


def ingest_in_process(root: str, entries: list[Entry]) -> int:
    """Target of the multi-process test (spawned: importable by module name)."""
    return PrivateStore(root).ingest_values(entries)


def local_root(tmp_path: Path) -> str:
    return str(tmp_path / "derived" / "v1" / "tenant" / "project" / "env")


# --- hypothesis strategies for values -------------------------------------------------------

names = st.text(max_size=8)


@st.composite
def medias(draw: st.DrawFn) -> Media:
    source = draw(st.sampled_from([None, *MEDIA_SOURCES]))
    content = "" if source is None else draw(st.text(max_size=12))
    return Media(draw(st.sampled_from(MediaKind)), draw(st.none() | names), source, content)


scalars: st.SearchStrategy[Value] = st.one_of(
    st.just(NULL),
    st.booleans().map(Bool),
    st.integers(I64_MIN, I64_MAX).map(Int),
    st.floats(allow_nan=True, allow_infinity=True).map(Float),
    st.integers().map(lambda n: BigInt(str(n))),
    st.text(max_size=20).map(String),
    st.binary(max_size=20).map(Bytes),
    st.builds(Enum, names, names),
    medias(),
    st.text(max_size=20).map(Omitted),
)


def _containers(children: st.SearchStrategy[Value]) -> st.SearchStrategy[Value]:
    keys = st.one_of(names, st.sampled_from(["a", "a.b", "", "$x", 'q"uote', "ünï", "0"]))
    entries = st.lists(st.tuples(keys, children), max_size=5).map(tuple)
    return st.one_of(
        st.lists(children, max_size=5).map(lambda xs: List(tuple(xs))),
        entries.map(Map),
        st.builds(Class, names.filter(lambda n: n != OMITTED_CLASS), entries),
    )


values: st.SearchStrategy[Value] = st.recursive(scalars, _containers, max_leaves=25)
