"""``calls_v1`` and ``errors_v1`` rows (reference facts §5.2, §4.5).

Value columns per role: ``<role>_state`` (``available`` | ``lost:<reason>`` |
``not_captured`` | ``not_applicable``), ``<role>_cid`` and the virtual handle column (NULL when
not applicable). A role applies when the SpanStart's ``roles`` select it *and* the call's
outcome can carry it: a selected role with a fact always applies; without one, ``output``
does not apply to a call that ended other than ``ok``, and ``error`` applies only to a call
that ended ``errored`` or has a TerminalErrorRef. A selected, applicable role without a fact
is ``not_captured``. A call's error value is its TerminalErrorRef's ErrorCapture value; a
terminal link that was lost gives ``lost:<reason>`` where the capture loss has a value-loss
counterpart, else ``not_captured`` (``error_lost_reason`` names it).
"""

from __future__ import annotations

from typing import Any

from baml_studio.catalog.fold_cct import stack
from baml_studio.catalog.fold_gather import Gathered
from baml_studio.catalog.fold_inputs import ProcessInfo
from baml_studio.catalog.fold_meta import wall_ns
from baml_studio.catalog.fold_names import (
    OVERFLOW_REASON_SQL,
    ROLE_BITS,
    SELECTION_BITS,
    bit_names,
    debug_name,
    edge_sql,
    function_entry,
    function_name,
    kind_sql,
    lower,
    site_file,
)
from baml_studio.catalog.handles import handle_for, state_text
from baml_studio.format.function_table import FunctionTable
from baml_studio.format.ids import error_id_wire, runtime_id_wire, value_cid_wire
from baml_studio.format.records import (
    ROLE_ERROR,
    ROLE_INPUT,
    ROLE_OUTPUT,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    FunctionEndStatus,
    NormalContext,
    SpanStart,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueRole,
    ValueState,
)

_CAPTURE_LOSS_AS_VALUE_LOSS = {
    ErrorCaptureLossReason.ERROR_CAPTURE_ATTEMPT_TRANSPORT_EXCEEDED: (
        ValueLossReason.ERROR_CAPTURE_ATTEMPT_TRANSPORT_EXCEEDED
    ),
    ErrorCaptureLossReason.EVIDENCE_SEGMENT_PUBLISH_FAILED: (
        ValueLossReason.EVIDENCE_SEGMENT_PUBLISH_FAILED
    ),
    ErrorCaptureLossReason.DISK_GUARD_EXCEEDED: ValueLossReason.DISK_GUARD_EXCEEDED,
    ErrorCaptureLossReason.STORE_UNAVAILABLE: ValueLossReason.STORE_UNAVAILABLE,
}


def value_columns(column: str, state: ValueState | None, applicable: bool) -> dict[str, Any]:
    """``<column>_state``, ``<column>_cid`` and the virtual ``<column>`` handle."""
    cid = state.cid if isinstance(state, ValueAvailable) else None
    return {
        f"{column}_state": state_text(state, applicable),
        f"{column}_cid": None if cid is None else value_cid_wire(cid),
        column: handle_for(state) if applicable else None,
    }


def _error_value(g: Gathered, span: SpanStart) -> tuple[ValueState | None, bool, dict[str, Any]]:
    target = g.terminal.get(span.call)
    extra: dict[str, Any] = {"error_id": None, "error_lost_reason": None}
    state: ValueState | None = None
    if isinstance(target, ErrorCaptureId):
        extra["error_id"] = error_id_wire(target.thread, target.unwind_ordinal)
        capture = g.captures.get(target)
        state = None if capture is None else capture.value
    elif target is not None:
        extra["error_lost_reason"] = debug_name(target)
        loss = _CAPTURE_LOSS_AS_VALUE_LOSS.get(target)
        state = None if loss is None else ValueLost(loss)
    end = g.ends.get(span.call)
    errored = end is not None and end.status == FunctionEndStatus.ERRORED
    applicable = bool(span.roles & ROLE_ERROR) and (target is not None or errored)
    return state, applicable, extra


def call_rows(
    execution_id: str, g: Gathered, table: FunctionTable | None, process: ProcessInfo
) -> list[dict[str, Any]]:
    rows = []
    for call in sorted(g.spans):
        span = g.spans[call]
        end = g.ends.get(call)
        entry = function_entry(table, span.function_id)
        site = span.call_site
        ctx = span.context
        args = g.values.get((call, ValueRole.INPUT))
        output = g.values.get((call, ValueRole.OUTPUT))
        output_fits = end is None or end.status == FunctionEndStatus.OK or output is not None
        error, error_applies, error_extra = _error_value(g, span)
        runtime = g.runtime_ids.get(call, {})
        rows.append(
            {
                "execution_id": execution_id,
                "call_id": call.wire(),
                "parent_call_id": None if span.parent is None else span.parent.wire(),
                "thread_id": span.thread.wire(),
                "call_path_id": ctx.key.hex() if isinstance(ctx, NormalContext) else None,
                "call_path_overflow_reason": (
                    None if isinstance(ctx, NormalContext) else OVERFLOW_REASON_SQL[ctx.reason]
                ),
                "function_id": span.function_id,
                "fqn": None if entry is None else entry.fqn,
                "definition_key": None if entry is None else entry.definition_key,
                "kind": kind_sql(entry),
                "edge_kind": edge_sql(span.edge_kind),
                "call_site_file": site_file(table, site),
                "call_site_line": None if site is None else site.line,
                "call_site_start": None if site is None else site.start_offset,
                "call_site_end": None if site is None else site.end_offset,
                "started_ns": span.started_ns,
                "ended_ns": None if end is None else end.ended_ns,
                "duration_ns": None if end is None else end.inclusive_ns,
                "started_at": wall_ns(process, span.started_ns),
                "ended_at": wall_ns(process, None if end is None else end.ended_ns),
                "status": None if end is None else lower(end.status),
                "selection_reasons": bit_names(span.selection_reasons, SELECTION_BITS),
                "roles": bit_names(span.roles, ROLE_BITS),
                "runtime_ids": [runtime_id_wire(runtime[k]) for k in sorted(runtime)],
                **value_columns("args", args, bool(span.roles & ROLE_INPUT)),
                **value_columns("output", output, bool(span.roles & ROLE_OUTPUT) and output_fits),
                **value_columns("error", error, error_applies),
                **error_extra,
            }
        )
    return rows


def error_rows(execution_id: str, g: Gathered, table: FunctionTable | None) -> list[dict[str, Any]]:
    contexts = {ctx.key: ctx for ctx in g.cct.contexts}
    rows = []
    for capture_id in sorted(g.captures):
        capture = g.captures[capture_id]
        ctx = capture.context
        thrower = function_name(table, capture.throw_function_id)
        if isinstance(ctx, NormalContext):
            names, complete = stack(contexts, ctx.key, table)
        else:
            names, complete = [], False
        if not names:
            names = [thrower or f"function#{capture.throw_function_id}"]
        site = capture.throw_site
        rows.append(
            {
                "execution_id": execution_id,
                "error_id": error_id_wire(capture_id.thread, capture_id.unwind_ordinal),
                "throw_call_id": capture.throw_call.wire(),
                "throw_thread_id": capture.throw_call.thread.wire(),
                "throw_call_path_id": ctx.key.hex() if isinstance(ctx, NormalContext) else None,
                "throw_function_id": capture.throw_function_id,
                "throw_fqn": thrower,
                "throw_site_file": site_file(table, site),
                "throw_site_line": None if site is None else site.line,
                "throw_site_start": None if site is None else site.start_offset,
                "throw_site_end": None if site is None else site.end_offset,
                "kind": lower(capture.kind),
                "source": lower(capture.source),
                **value_columns("value", capture.value, True),
                "stack_complete": complete,
                "stack": names,
                "terminal_call_ids": [c.wire() for c in g.terminal_calls.get(capture_id, [])],
            }
        )
    return rows
