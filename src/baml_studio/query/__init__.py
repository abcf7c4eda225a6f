"""SQL over catalog v1 (reference facts §5): gatekeeper, value-expression rewrite, DataFusion
session, hydration of value handles, budgets, and the typed ``QueryOutcome``.

    engine = QueryEngine(source, QueryBudgets(max_result_rows=100))
    result = engine.execute("SELECT call_id, args['customer']['age'] AS age FROM calls")
    for row in result:
        ...
    result.outcome()   # {"queryCompleted": true, "resultState": "complete", ...}
"""

from __future__ import annotations

from baml_studio.query.config import QueryBudgets
from baml_studio.query.engine import QueryEngine
from baml_studio.query.errors import (
    BudgetExceeded,
    DependencyUnavailable,
    InternalQueryError,
    InvalidSql,
    QueryCancelled,
    QueryError,
)
from baml_studio.query.outcome import UNAVAILABLE_REASONS, QueryOutcome
from baml_studio.query.result import QueryResult
from baml_studio.tablecell import table_cell

__all__ = [
    "UNAVAILABLE_REASONS",
    "BudgetExceeded",
    "DependencyUnavailable",
    "InternalQueryError",
    "InvalidSql",
    "QueryBudgets",
    "QueryCancelled",
    "QueryEngine",
    "QueryError",
    "QueryOutcome",
    "QueryResult",
    "table_cell",
]
