"""Chunked scans: row-wise queries over one per-execution relation stream chunk by chunk.

A query that only filters and projects rows of one relation (no join, aggregate, DISTINCT,
ORDER BY, window, OFFSET or subquery) gives the same rows whether it runs over all executions
at once or over consecutive chunks of them, concatenated. Running it chunk by chunk lets the
first rows stream after folding one chunk instead of the whole store, and a LIMIT stops folding
as soon as it is met.
"""

from __future__ import annotations

from sqlglot import exp

from baml_studio.catalog.schema import VIEWS

VIEW_NAMES = frozenset(name for view in VIEWS for name in (view.name, view.alias))
CHUNK_EXECUTIONS = 64
"""Executions folded per chunk."""


def chunkable(query: exp.Expr | None) -> tuple[bool, int | None]:
    """Whether ``query`` can run chunk by chunk, and its LIMIT (None if it has none)."""
    if not isinstance(query, exp.Select):
        return False, None
    blocked = ("joins", "group", "order", "having", "distinct", "offset", "qualify", "with_")
    if any(query.args.get(key) for key in (*blocked, "with", "windows")):
        return False, None
    tables = list(query.find_all(exp.Table))
    if len(tables) != 1 or tables[0].name.lower() in VIEW_NAMES:
        return False, None  # a view may carry its own ORDER BY and filters
    if any(query.find_all(exp.AggFunc, exp.Window, exp.Subquery, exp.Union)):
        return False, None
    limit = query.args.get("limit")
    if limit is None:
        return True, None
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if isinstance(value, exp.Literal) and value.is_int:
        return True, int(value.this)
    return False, None


def chunks(ids: list[str], size: int = CHUNK_EXECUTIONS) -> list[list[str]]:
    return [ids[start : start + size] for start in range(0, len(ids), size)] or [[]]
