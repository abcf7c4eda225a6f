"""What the meta plane alone decides about an execution (reference facts §5.3).

``status`` and ``index_state`` need no data file, nor do the root row's *index columns*
(:data:`META_ROOT_COLUMNS`): this is what lets root threads be listed and counted without
opening a data segment.
"""

from __future__ import annotations

from typing import Any

from baml_studio.catalog.fold_inputs import ExecutionMeta, ProcessInfo
from baml_studio.format.ids import runtime_id_wire
from baml_studio.format.records import ROOT_ENDED_FLAG_ROOT_STARTED_LOST

I64_MAX = (1 << 63) - 1

META_ROOT_COLUMNS: frozenset[str] = frozenset(
    {
        "execution_id",
        "thread_id",
        "parent_thread_id",
        "spawn_call_id",
        "spawn_function_id",
        "spawn_fqn",
        "spawn_site_file",
        "spawn_site_line",
        "kind",
        "process_id",
        "engine_id",
        "program_id",
        "revision_id",
        "source_label",
        "runtime_id",
        "status",
        "index_state",
        "data_first_seq",
        "data_last_seq",
        "data_file_count",
    }
)
"""threads_v1 columns whose root-row values come from the meta plane alone (the fold gives
the same values); every other column needs the execution's data."""


def status(meta: ExecutionMeta, process: ProcessInfo) -> str:
    """``ended.status`` lower-cased; else ``running`` if the process is alive; else
    ``abandoned``."""
    if meta.ended is not None:
        return meta.ended.status.name.lower()
    return "running" if process.alive else "abandoned"


def index_state(meta: ExecutionMeta, process: ProcessInfo) -> str:
    """The first rule that holds: ``index_corrupt``, ``root_started_lost``,
    ``no_root_ended``, ``complete``.

    ``index_corrupt``: a meta gap after RootStarted's sequence and before RootEnded's (or
    anywhere after it when RootEnded is absent), or RootEnded without RootStarted whose
    ``root_started_lost`` flag is clear.
    """
    ended = meta.ended
    if meta.started is not None:
        start, end = meta.started_seq, meta.ended_seq if ended is not None else None
        if any(g > start and (end is None or g < end) for g in process.meta_gaps):
            return "index_corrupt"
    lost_flag = ended is not None and bool(ended.flags & ROOT_ENDED_FLAG_ROOT_STARTED_LOST)
    if ended is not None and meta.started is None and not lost_flag:
        return "index_corrupt"
    if lost_flag:
        return "root_started_lost"
    if ended is None:
        return "no_root_ended"
    return "complete"


def wall_ns(process: ProcessInfo, ns: int | None) -> int | None:
    """``zero_unix_ns + ns`` as a UTC timestamp value; None without StreamStarted or past
    i64."""
    if ns is None or process.stream_started is None:
        return None
    total = process.stream_started.zero_unix_ns + ns
    return total if total <= I64_MAX else None


def meta_root_row(meta: ExecutionMeta, process: ProcessInfo) -> dict[str, Any]:
    """The :data:`META_ROOT_COLUMNS` of the execution's root row."""
    root_id = meta.execution_id
    engine = meta.engine
    ended = meta.ended
    return {
        "execution_id": root_id,
        "thread_id": root_id,
        "parent_thread_id": None,
        "spawn_call_id": None,
        "spawn_function_id": None,
        "spawn_fqn": None,
        "spawn_site_file": None,
        "spawn_site_line": None,
        "kind": "root",
        "process_id": process.process_id,
        "engine_id": meta.root.engine,
        "program_id": None if engine is None else engine.program_id.hex(),
        "revision_id": None if engine is None else engine.revision_label,
        "source_label": None if engine is None else engine.source_label,
        "runtime_id": None if meta.started is None else runtime_id_wire(meta.started.runtime_id),
        "status": status(meta, process),
        "index_state": index_state(meta, process),
        "data_first_seq": 0 if ended is None else ended.data_first_seq,
        "data_last_seq": 0 if ended is None else ended.data_last_seq,
        "data_file_count": 0 if ended is None else ended.data_segment_count,
    }
