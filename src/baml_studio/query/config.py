"""Budgets of one query (reference facts §5.6).

Read once at the entry point (the CLI's ``--max-rows`` / ``--max-wall``, the coordinator's
request) and handed to :class:`baml_studio.query.engine.QueryEngine`. Exhausting any of them ends
the query with ``resultState: budget_exhausted`` and error ``E_QUERY_BUDGET_EXCEEDED``; rows
already streamed stay streamed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class QueryBudgets:
    max_wall_s: float = 30.0
    """Wall-clock seconds from ``execute`` to the last row (CLI ``--max-wall``)."""

    max_result_rows: int = 10_000
    """Rows the query may stream; one more row ends it as exhausted (CLI ``--max-rows``)."""

    max_hydrations: int = 100_000
    """Value bodies the query may read from the source (cache hits are free)."""

    max_decoded_bytes: int = 256 * MIB
    """Total bytes of value bodies the query may read and decode."""

    max_value_bytes: int = 16 * MIB
    """Largest single value body read; a larger one is unavailable (``truncated``), not fatal."""

    rows_setting: str = "--max-rows"
    """How the caller raises ``max_result_rows``, for the remedy of running out of it (the
    coordinator's callers send ``budget.max_result_rows``, not a CLI option)."""

    wall_setting: str = "--max-wall"
    """How the caller raises ``max_wall_s``, for the remedy of running out of it."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                continue
            if not value > 0:
                raise ValueError(f"QueryBudgets.{f.name} must be positive, got {value!r}")
