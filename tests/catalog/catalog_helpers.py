"""Shared helpers for the catalog tests: plain rows, IPC bytes, store copies and damage."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.schema import BY_NAME, RELATIONS
from baml_studio.profiler import Profiler, ProfilerConfig
from baml_studio.store import Plane, StoreLayout

ALL_RELATIONS = [r.name for r in RELATIONS]


def plain(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts; timestamps as int64 ns (pyarrow cannot make datetimes of them)."""
    columns = {
        f.name: table[f.name].cast(pa.int64()) if pa.types.is_timestamp(f.type) else table[f.name]
        for f in table.schema
    }
    return pa.table(columns).to_pylist() if columns else []


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def all_tables(root: Path) -> dict[str, pa.Table]:
    return LocalStoreSource(root).tables(ALL_RELATIONS, None)


def check_schemas(tables: dict[str, pa.Table]) -> None:
    """Every table has exactly its relation's schema and no NULL in a non-nullable column."""
    for name, table in tables.items():
        schema = BY_NAME[name].schema()
        assert table.schema.equals(schema, check_metadata=True), name
        for field in schema:
            if not field.nullable:
                assert table[field.name].null_count == 0, (name, field.name)


def by_key(rows: Iterable[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        assert row[key] not in out, f"duplicate {key} {row[key]}"
        out[row[key]] = row
    return out


def copy_store(src: Path, dst_parent: Path) -> Path:
    """A copy of a ``.baml/profiles-v1`` store under ``dst_parent``; returns the new root."""
    dst = dst_parent / ".baml" / "profiles-v1"
    shutil.copytree(src, dst)
    return dst


def segment(root: Path, euid: bytes, plane: Plane, seq: int) -> Path:
    return StoreLayout(root).segment_path(euid, plane, seq)


def flip_byte(path: Path, offset: int = 60) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def health(rows: Iterable[dict[str, Any]], execution_id: str) -> list[tuple[Any, ...]]:
    """``(metric, plane, value, edge_kind, reason)`` of one execution, in table order."""
    return [
        (r["metric"], r["plane"], r["value"], r["edge_kind"], r["reason"])
        for r in rows
        if r["execution_id"] == execution_id
    ]


def data_rows(rows: Iterable[dict[str, Any]], execution_id: str) -> list[tuple[str, int, str]]:
    return [(m, v, reason) for m, p, v, _, reason in health(rows, execution_id) if p == "data"]


def profile(root: Path, steps: Callable[[Profiler], None]) -> None:
    """Run ``steps`` under a fresh active profiler writing ``root`` (publishing only on
    flush), then flush and close it."""
    profiler = Profiler(ProfilerConfig(store_root=root, publish_interval_s=None)).activate()
    try:
        steps(profiler)
        assert profiler.flush()
    finally:
        profiler.close()
