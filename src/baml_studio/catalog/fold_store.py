"""Execution-independent relations from the index: ``function_definitions_v1`` and
``processes_v1`` (pure; the store inventories ``store_files_v1`` and ``value_index_v1`` are
read by :mod:`.load`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from baml_studio.catalog.fold_inputs import ProcessInfo
from baml_studio.format.function_table import FunctionTable
from baml_studio.format.records import EngineStarted


def function_definition_rows(
    engines: Iterable[EngineStarted], table_of: Callable[[bytes | None], FunctionTable | None]
) -> list[dict[str, Any]]:
    """One row per function of every distinct program, sorted by (program_id, function_id).

    Engines are taken by program id, then by function-table CID; for each program the first
    readable table wins (identical programs share one table). An unknown kind reads
    ``bytecode`` and an unknown origin ``user``.
    """
    chosen: dict[bytes, tuple[EngineStarted, FunctionTable]] = {}
    for engine in sorted(engines, key=lambda e: (e.program_id, e.function_table_cid or b"")):
        if engine.program_id in chosen:
            continue
        table = table_of(engine.function_table_cid)
        if table is not None:
            chosen[engine.program_id] = (engine, table)
    rows: list[dict[str, Any]] = []
    for program_id in sorted(chosen):
        engine, table = chosen[program_id]
        for f in table.functions:
            span = f.source_span
            source_file = f.source_file
            if source_file is None and span is not None:
                source_file = table.file_path(span.file_id)
            rows.append(
                {
                    "program_id": program_id.hex(),
                    "function_id": f.function_id,
                    "fqn": f.fqn,
                    "display_name": f.display_name,
                    "definition_key": f.definition_key,
                    "kind": "bytecode" if f.kind is None else f.kind.sql,
                    "kind_detail": f.kind_detail,
                    "origin": "user" if f.origin is None else f.origin.sql,
                    "source_file": source_file,
                    "source_start": None if span is None else span.start,
                    "source_end": None if span is None else span.end,
                    "package": f.package_name,
                    "namespace": ".".join(f.namespace),
                    "revision_id": engine.revision_label,
                    "source_label": engine.source_label,
                }
            )
    return rows


def process_rows(processes: Iterable[ProcessInfo]) -> list[dict[str, Any]]:
    """One row per stream, sorted by process id."""
    rows = []
    for p in sorted(processes, key=lambda p: p.euid):
        started = p.stream_started
        rows.append(
            {
                "process_id": p.process_id,
                "os_pid": None if started is None else started.pid,
                "zero_unix_ns": None if started is None else started.zero_unix_ns,
                "baml_version": None if started is None else started.baml_version,
                "os_arch": None if started is None else started.os_arch,
                "alive": p.alive,
                "meta_hw": p.meta_hw,
                "data_hw": p.data_hw,
            }
        )
    return rows
