"""``call_path_stats_v1`` rows from an execution's merged CCT, and walks up the context tree
(depth, error stacks).

Timing: the u128 sums saturate to u64, and ``self_ns = inclusive - direct children - await`` is
derived after the merge, clamped at 0. A row's ``timing_complete`` is false if the execution's
CCT health has any bit set (the producer's bits are per group, not per context), or if this
row saturated or underflowed. The derived underflow is also OR-ed into the ``cct`` health
rows' ``self_time_underflow``.
"""

from __future__ import annotations

from typing import Any

from baml_studio.catalog.fold_names import (
    OVERFLOW_REASON_SQL,
    edge_sql,
    function_entry,
    kind_sql,
    origin_sql,
    overflow_id,
    site_file,
)
from baml_studio.format.cct import self_ns
from baml_studio.format.function_table import FunctionTable
from baml_studio.format.records import CCT_SELF_TIME_UNDERFLOW, CctContext, CctCounters, CctSection

U64_MAX = (1 << 64) - 1


def saturate(value: int) -> tuple[int, bool]:
    return (value, False) if value <= U64_MAX else (U64_MAX, True)


def depths(contexts: dict[bytes, CctContext]) -> dict[bytes, int]:
    """Parent links followed from each context until a root, a key outside the execution or
    a key already on the walk (a cycle); memoized, so each context is walked once."""
    memo: dict[bytes, int] = {}
    for start in contexts:
        path: list[bytes] = []
        on_path: set[bytes] = set()
        key: bytes | None = start
        base = 0
        while key is not None:
            if key in memo:
                base = memo[key]
                break
            ctx = contexts.get(key)
            if ctx is None:  # a parent outside the execution: the link itself counts
                base = 0
                break
            if key in on_path:  # a cycle: stop here
                base = -1
                break
            path.append(key)
            on_path.add(key)
            key = ctx.tuple.parent_key if ctx.tuple is not None else None
        for offset, step in enumerate(reversed(path)):
            memo[step] = base + offset + (0 if key is None else 1)
    return memo


def stack(
    contexts: dict[bytes, CctContext], key: bytes, table: FunctionTable | None
) -> tuple[list[str], bool]:
    """Function names from the root context down to ``key``, and whether the walk reached a
    root context (a tuple without parent). Unknown function ids read ``function#<id>``."""
    names: list[str] = []
    seen: set[bytes] = set()
    current: bytes | None = key
    while current is not None:
        ctx = contexts.get(current)
        if ctx is None or ctx.tuple is None or current in seen:
            names.reverse()
            return names, False
        seen.add(current)
        entry = function_entry(table, ctx.tuple.function_id)
        names.append(entry.fqn if entry is not None else f"function#{ctx.tuple.function_id}")
        current = ctx.tuple.parent_key
    names.reverse()
    return names, True


def _timing(counters: CctCounters) -> dict[str, Any]:
    inclusive, s1 = saturate(counters.inclusive_ns)
    direct, s2 = saturate(counters.direct_call_child_inclusive_ns)
    await_ns, s3 = saturate(counters.await_ns)
    return {
        "calls_started": counters.invocations_started,
        "calls_selected": counters.spans_selected,
        "completed_ok": counters.completed_ok,
        "completed_error": counters.completed_error,
        "completed_cancelled": counters.completed_cancelled,
        "completed_exit": counters.completed_exit,
        "inclusive_ns": inclusive,
        "direct_child_ns": direct,
        "await_ns": await_ns,
        "await_count": counters.await_count,
        "_saturated": s1 or s2 or s3,
    }


def call_path_rows(
    execution_id: str, cct: CctSection, table: FunctionTable | None
) -> tuple[list[dict[str, Any]], int]:
    """The rows, sorted by call_path_id, and the derived health bits (self-time underflow)."""
    contexts = {ctx.key: ctx for ctx in cct.contexts}
    depth = depths(contexts)
    derived = 0
    rows: list[dict[str, Any]] = []
    for key, ctx in sorted(contexts.items()):
        tup = ctx.tuple
        entry = function_entry(table, tup.function_id) if tup is not None else None
        site = tup.call_site if tup is not None else None
        row = _timing(ctx.counters)
        own, underflow = self_ns(ctx.counters)
        own, own_saturated = saturate(own)
        derived |= CCT_SELF_TIME_UNDERFLOW if underflow else 0
        saturated = row.pop("_saturated") or own_saturated
        row.update(
            execution_id=execution_id,
            call_path_id=key.hex(),
            parent_call_path_id=(tup.parent_key.hex() if tup and tup.parent_key else None),
            depth=depth[key],
            function_id=tup.function_id if tup is not None else 0,
            fqn=None if entry is None else entry.fqn,
            definition_key=None if entry is None else entry.definition_key,
            kind=kind_sql(entry),
            origin=origin_sql(entry),
            call_site_file=site_file(table, site),
            call_site_line=None if site is None else site.line,
            call_site_start=None if site is None else site.start_offset,
            call_site_end=None if site is None else site.end_offset,
            edge_kind=edge_sql(tup.edge_kind) if tup is not None else "call",
            self_ns=own,
            timing_complete=not (cct.health or underflow or saturated),
            overflow_reason=None,
        )
        rows.append(row)
    for ovf in cct.overflows:
        row = _timing(ovf.counters)
        del row["_saturated"]
        row.update(
            execution_id=execution_id,
            call_path_id=overflow_id(ovf.reason, ovf.edge_kind),
            parent_call_path_id=None,
            depth=0,
            function_id=0,
            edge_kind=edge_sql(ovf.edge_kind),
            self_ns=0,
            timing_complete=False,
            overflow_reason=OVERFLOW_REASON_SQL[ovf.reason],
        )
        rows.append(row)
    rows.sort(key=lambda r: str(r["call_path_id"]))
    return rows, derived
