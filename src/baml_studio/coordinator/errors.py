"""Typed errors of the query coordinator, in the ``QueryOutcomeError`` shape.

Exception tree (the query engine's tree, :mod:`baml_studio.query.errors`, extended)::

    QueryError
    ├── QueryTooCostly         query_too_costly: the estimate exceeds the interactive budget;
    │                          the remedy points to POST /v1/query-jobs
    └── (InvalidSql, BudgetExceeded, DependencyUnavailable, QueryCancelled, InternalQueryError)

Refusals before a query starts (a bad request, a token without the environment, the control
plane down while binding the snapshot) are HTTP errors (:mod:`baml_studio.apierrors`); once a
run has started, every failure ends its stream with a typed outcome.
"""

from __future__ import annotations

from baml_studio.query.errors import QueryError

JOBS_REMEDY = (
    "run it as a background job: POST /v1/query-jobs with the same body "
    "(baml-studio jobs start), or narrow it by execution_id, function or time window"
)


class QueryTooCostly(QueryError):
    code = "query_too_costly"

    def __init__(self, message: str) -> None:
        super().__init__(message, JOBS_REMEDY)
