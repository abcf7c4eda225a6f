"""``threads_v1`` rows: one per ThreadStart, with the root row first (reference facts §5.2).

The root row is the execution's grain (``parent_thread_id IS NULL``). It carries the
execution-level columns and is emitted even without a root ThreadStart (a *synthetic* root
row). Its :data:`~baml_studio.catalog.fold_meta.META_ROOT_COLUMNS` come from the meta plane
only (:func:`~baml_studio.catalog.fold_meta.meta_root_row`), so they match a meta-only
listing exactly. A spawned thread whose start names no parent hangs off the root, so that
``parent_thread_id IS NULL`` keeps meaning "execution".
"""

from __future__ import annotations

from typing import Any

from baml_studio.catalog.fold_gather import Gathered
from baml_studio.catalog.fold_inputs import ExecutionInputs
from baml_studio.catalog.fold_meta import meta_root_row, wall_ns
from baml_studio.catalog.fold_names import function_name, lower, site_file
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import EdgeKind, ValueLost

U64_MAX = (1 << 64) - 1


def _value_state(g: Gathered) -> str:
    """Over input/output occurrences: ``none``, ``partial`` (any lost) or ``complete``."""
    if not g.values:
        return "none"
    return "partial" if any(isinstance(v, ValueLost) for v in g.values.values()) else "complete"


def _entry_function(g: Gathered, root: ThreadRef) -> int | None:
    """The function of the root span (edge Root), else of the CCT's root context."""
    spans = [s for s in g.spans.values() if s.edge_kind == EdgeKind.ROOT and s.thread == root]
    if spans:
        return min(spans, key=lambda s: s.call).function_id
    for ctx in g.cct.contexts:
        if ctx.tuple is not None and ctx.tuple.edge_kind == EdgeKind.ROOT:
            return ctx.tuple.function_id
    return None


def _root_started_ns(inputs: ExecutionInputs, g: Gathered) -> int:
    """The root ThreadStart's time, else RootStarted's, else 0."""
    start = g.thread_starts.get(inputs.meta.root)
    if start is not None:
        return start.started_ns
    return 0 if inputs.meta.started is None else inputs.meta.started.started_ns


def _duration(inputs: ExecutionInputs, g: Gathered, root: ThreadRef) -> int | None:
    root_spans = sorted(c for c, s in g.spans.items() if s.edge_kind == EdgeKind.ROOT)
    for call in root_spans:
        if call.thread == root and call in g.ends:
            return g.ends[call].inclusive_ns
    started, ended = inputs.meta.started, inputs.meta.ended
    if started is None or ended is None:
        return None
    return max(0, ended.ended_ns - started.started_ns)


def _sum(values: list[int]) -> int:
    return min(sum(values), U64_MAX)


def thread_rows(inputs: ExecutionInputs, g: Gathered) -> list[dict[str, Any]]:
    meta, process, table = inputs.meta, inputs.process, inputs.function_table
    root = meta.root
    execution_id = meta.execution_id
    others = sorted(t for t in g.thread_starts if t != root)
    root_start = g.thread_starts.get(root)
    counters = [c.counters for c in g.cct.contexts] + [o.counters for o in g.cct.overflows]
    entry_id = _entry_function(g, root)
    root_row = meta_root_row(meta, process)
    root_row.update(
        entry_function_id=entry_id,
        entry_fqn=None if entry_id is None else function_name(table, entry_id),
        duration_ns=_duration(inputs, g, root),
        total_calls=_sum([c.invocations_started for c in counters]),
        total_errors=_sum([c.completed_error for c in counters]),
        total_cancelled=_sum([c.completed_cancelled for c in counters]),
        calls_retained=len(g.spans),
        threads_total=1 + len(others),
        value_state=_value_state(g),
    )
    root_name = root_start.name if root_start is not None else ""
    rows = [_thread_fields(root_row, inputs, g, root, root_name, _root_started_ns(inputs, g))]
    for thread in others:
        start = g.thread_starts[thread]
        spawn = g.spans.get(start.spawn_call) if start.spawn_call is not None else None
        site = start.spawn_site
        row: dict[str, Any] = {
            "execution_id": execution_id,
            "thread_id": thread.wire(),
            "parent_thread_id": (start.parent or root).wire(),
            "spawn_call_id": None if start.spawn_call is None else start.spawn_call.wire(),
            "spawn_function_id": None if spawn is None else spawn.function_id,
            "spawn_fqn": None if spawn is None else function_name(table, spawn.function_id),
            "spawn_site_file": site_file(table, site),
            "spawn_site_line": None if site is None else site.line,
            "kind": lower(start.kind),
        }
        rows.append(_thread_fields(row, inputs, g, thread, start.name, start.started_ns))
    return rows


def _thread_fields(
    row: dict[str, Any],
    inputs: ExecutionInputs,
    g: Gathered,
    thread: ThreadRef,
    name: str,
    started_ns: int,
) -> dict[str, Any]:
    end = g.thread_ends.get(thread)
    ended_ns = None if end is None else end.ended_ns
    row.update(
        name=name or None,
        started_ns=started_ns,
        ended_ns=ended_ns,
        started_at=wall_ns(inputs.process, started_ns),
        ended_at=wall_ns(inputs.process, ended_ns),
        end_status=None if end is None else lower(end.status),
    )
    return row
