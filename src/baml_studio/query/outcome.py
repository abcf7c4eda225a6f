"""The typed end of every query stream: ``QueryOutcome`` (openapi.yaml; reference facts §5.7).

``resultState`` is ``complete`` only when the query ran to its end and every value it needed was
available; ``incomplete`` when it ran to its end but some values were unavailable (counted in
``valueEvaluations.byReason``, never silently dropped); ``failed``, ``budget_exhausted`` or
``cancelled`` otherwise, with an ``error``.

The snapshot follows openapi's ``QueryExecutionSnapshot`` (``catalogVersion``, ``generation``,
``lanceVersion``). A local store has no Lance dataset: the private part is the store itself, and
its version is ``projected_through``, the highest committed data sequence the answer covers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

from baml_studio.catalog.source import Snapshot
from baml_studio.query.errors import BudgetExceeded, QueryCancelled, QueryError

ResultState = Literal["complete", "incomplete", "failed", "budget_exhausted", "cancelled"]

UNAVAILABLE_REASONS = (
    "pending",
    "not_captured",
    "omitted",
    "redacted",
    "lost",
    "truncated",
    "corrupt",
    "unsupported",
    "store_unavailable",
    "query_budget_exhausted",
)
"""``UnavailableReason`` spellings, the keys of ``valueEvaluations.byReason``."""


class ValueEvaluations:
    """Thread-safe counters of value evaluations (DataFusion runs UDFs on its own threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.available = 0
        self.unavailable = 0
        self.by_reason: dict[str, int] = {}

    @property
    def attempted(self) -> int:
        return self.available + self.unavailable

    def count_available(self) -> None:
        with self._lock:
            self.available += 1

    def count_unavailable(self, reason: str) -> None:
        if reason not in UNAVAILABLE_REASONS:
            reason = "lost"
        with self._lock:
            self.unavailable += 1
            self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def to_json(self) -> dict[str, object]:
        with self._lock:
            return {
                "attempted": self.available + self.unavailable,
                "available": self.available,
                "unavailable": self.unavailable,
                "byReason": dict(sorted(self.by_reason.items())),
            }


@dataclass(frozen=True, slots=True)
class QueryOutcome:
    result_state: ResultState
    snapshot: Snapshot
    rows_streamed: int
    value_evaluations: dict[str, object] = field(
        default_factory=lambda: ValueEvaluations().to_json()
    )
    error: QueryError | None = None

    @property
    def query_completed(self) -> bool:
        return self.result_state in ("complete", "incomplete")

    @staticmethod
    def finished(snapshot: Snapshot, rows: int, evaluations: ValueEvaluations) -> QueryOutcome:
        """The outcome of a query that ran to its end."""
        state: ResultState = "complete" if evaluations.unavailable == 0 else "incomplete"
        return QueryOutcome(state, snapshot, rows, evaluations.to_json())

    @staticmethod
    def stopped(
        snapshot: Snapshot, rows: int, evaluations: ValueEvaluations, error: QueryError
    ) -> QueryOutcome:
        """The outcome of a query that ended early with ``error``."""
        state: ResultState = "failed"
        if isinstance(error, BudgetExceeded):
            state = "budget_exhausted"
        elif isinstance(error, QueryCancelled):
            state = "cancelled"
        return QueryOutcome(state, snapshot, rows, evaluations.to_json(), error)

    def to_json(self) -> dict[str, object]:
        """The camelCase ``QueryOutcome`` object."""
        out: dict[str, object] = {
            "queryCompleted": self.query_completed,
            "resultState": self.result_state,
            "snapshot": {
                "catalogVersion": self.snapshot.catalog_version,
                "generation": self.snapshot.generation,
                "lanceVersion": self.snapshot.projected_through,
            },
            "rowsStreamed": self.rows_streamed,
            "valueEvaluations": self.value_evaluations,
            # Every row of a local store is served with its private columns; nothing is pending.
            "privateState": {"indexed": self.rows_streamed, "pending": 0},
        }
        if self.error is not None:
            out["error"] = self.error.to_json()
        return out
