"""SQL spellings of the store's enums and bit sets (reference facts §3, §5.2)."""

from __future__ import annotations

from baml_studio.format.function_table import FunctionEntry, FunctionTable
from baml_studio.format.records import (
    HEALTH_FIELDS,
    ROLE_ERROR,
    ROLE_INPUT,
    ROLE_OUTPUT,
    SELECT_LLM,
    SELECT_MANUAL,
    SELECT_ROOT,
    CallSiteSpan,
    EdgeKind,
    ErrorCaptureLossReason,
    OverflowReason,
    ThrowSite,
)

OVERFLOW_REASON_SQL = {
    OverflowReason.CONTEXT_MEMORY_UNAVAILABLE_AFTER_DRAIN: "call_path_memory_unavailable",
    OverflowReason.INVALID_PARENT_CONTEXT: "invalid_parent_call_path",
}
SELECTION_BITS = ((SELECT_ROOT, "root"), (SELECT_LLM, "llm"), (SELECT_MANUAL, "manual"))
ROLE_BITS = ((ROLE_INPUT, "input"), (ROLE_OUTPUT, "output"), (ROLE_ERROR, "error"))
HEALTH_METRICS: tuple[str, ...] = tuple(
    name.replace("_segment_publish_failed", "_file_publish_failed") for name in HEALTH_FIELDS
)
"""The 26 execution counters as ``health_v1`` metrics (``*_segment_publish_failed`` renamed)."""


def lower(value: object) -> str:
    """An IntEnum member's SQL spelling: its name in lower case (``ok``, ``native_call`` …)."""
    name: str = getattr(value, "name")  # noqa: B009 - any enum member
    return name.lower()


def edge_sql(edge: EdgeKind) -> str:
    return edge.name.lower()


def overflow_id(reason: OverflowReason, edge: EdgeKind) -> str:
    """``overflow:<reason>:<edge>``, the call_path_id of an overflow row."""
    return f"overflow:{OVERFLOW_REASON_SQL[reason]}:{edge_sql(edge)}"


def bit_names(mask: int, bits: tuple[tuple[int, str], ...]) -> list[str]:
    return [name for bit, name in bits if mask & bit]


def debug_name(reason: ErrorCaptureLossReason) -> str:
    """Rust ``Debug`` of an ErrorCaptureLossReason: ``MissingStructuralJoin`` …"""
    return "".join(part.capitalize() for part in reason.name.split("_"))


def function_name(table: FunctionTable | None, function_id: int) -> str | None:
    entry = function_entry(table, function_id)
    return None if entry is None else entry.fqn


def function_entry(table: FunctionTable | None, function_id: int) -> FunctionEntry | None:
    return None if table is None else table.function(function_id)


def kind_sql(entry: FunctionEntry | None) -> str | None:
    """A function's kind; an unknown code reads as ``bytecode`` (as function_definitions)."""
    if entry is None:
        return None
    return "bytecode" if entry.kind is None else entry.kind.sql


def origin_sql(entry: FunctionEntry | None) -> str | None:
    if entry is None:
        return None
    return "user" if entry.origin is None else entry.origin.sql


def site_file(table: FunctionTable | None, site: CallSiteSpan | ThrowSite | None) -> str | None:
    """The path of a call, spawn or throw site's file (NULL if the table does not name it)."""
    if table is None or site is None:
        return None
    return table.file_path(site.file_id)
