"""Typed errors of the query engine. Each carries the ``QueryOutcomeError`` fields.

Exception tree::

    BamlStudioError
    └── QueryError                   .code .message .retryable .remedy
        ├── InvalidSql               invalid_sql: rejected by the gatekeeper or the planner
        ├── BudgetExceeded           E_QUERY_BUDGET_EXCEEDED: a QueryBudgets limit was reached
        ├── DependencyUnavailable    dependency_unavailable: the catalog source failed (transient)
        ├── QueryCancelled           cancelled: the consumer stopped the query
        └── InternalQueryError       internal: a bug; the message says where

:class:`~baml_studio.query.engine.QueryEngine.execute` does not raise these: it reports them in
the result's outcome. :meth:`~baml_studio.query.engine.QueryEngine.explain` raises them.
"""

from __future__ import annotations

from typing import ClassVar

from baml_studio.format.errors import BamlStudioError


class QueryError(BamlStudioError):
    code: ClassVar[str] = "internal"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def to_json(self) -> dict[str, object]:
        """The ``QueryOutcomeError`` object."""
        out: dict[str, object] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.remedy:
            out["remedy"] = self.remedy
        return out


class InvalidSql(QueryError):
    code = "invalid_sql"


class BudgetExceeded(QueryError):
    code = "E_QUERY_BUDGET_EXCEEDED"


class DependencyUnavailable(QueryError):
    code = "dependency_unavailable"
    retryable = True


class QueryCancelled(QueryError):
    code = "cancelled"


class InternalQueryError(QueryError):
    code = "internal"


def engine_message(exc: BaseException) -> str:
    """The useful line of a DataFusion error: the innermost ``caused by`` cause's first line."""
    text = str(exc).strip().removeprefix("DataFusion error: ")
    cause = text.split("\ncaused by\n")[-1].strip()
    first = cause.splitlines()[0] if cause else ""
    return first or type(exc).__name__
