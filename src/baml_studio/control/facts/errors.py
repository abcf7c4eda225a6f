"""Typed errors of the fact store, each one HTTP answer of the shared ``ErrorResponse`` shape.

Exception tree (the bases are :mod:`baml_studio.apierrors`)::

    BamlStudioError
    └── ApiError
        ├── BadRequest (400)
        │   ├── InvalidBatch           invalid_batch: unknown relation, wrong Arrow schema,
        │   │                          bad partition or empty id in a batch
        │   └── QueryRejected          query_rejected: ClickHouse refused the SQL (syntax,
        │                              unknown identifier/table/function, types, readonly)
        ├── Conflict (409)
        │   └── BatchConflict          batch_digest_conflict: the batch id is visible with
        │                              another content digest
        ├── PayloadTooLarge (413)
        │   └── BudgetExceeded         budget_exceeded: a query hit a read, result, time or
        │                              memory limit; ``details["limit"]`` names it
        ├── DependencyUnavailable (503, transient)
        │   └── FactStoreUnavailable   fact_store_unavailable: ClickHouse unreachable or failed
        └── ApiError (500)
            └── ChdbPathInUse          chdb_path_in_use: this process already opened another
                                       chDB path (chDB allows one per process for its life)

No ``clickhouse_connect`` or ``chdb`` exception leaves :mod:`baml_studio.control.facts`: the
adapter wraps each one in the matching type above (``raise ... from exc``), and retry policy is
``error.retryable`` (true only for :class:`FactStoreUnavailable`).
"""

from __future__ import annotations

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    Conflict,
    DependencyUnavailable,
    PayloadTooLarge,
)

__all__ = [
    "BatchConflict",
    "BudgetExceeded",
    "ChdbPathInUse",
    "FactStoreUnavailable",
    "InvalidBatch",
    "QueryRejected",
]


class InvalidBatch(BadRequest):
    """A batch the fact store cannot take as given; nothing was written."""

    code = "invalid_batch"


class QueryRejected(BadRequest):
    """ClickHouse refused the SQL itself; the same query will fail again."""

    code = "query_rejected"


class BatchConflict(Conflict):
    """The ``(scope, generation, batch_id)`` is already visible with different content."""

    code = "batch_digest_conflict"


class BudgetExceeded(PayloadTooLarge):
    """A query went over one of its budgets; ``details["limit"]`` is the setting or code name."""

    code = "budget_exceeded"


class FactStoreUnavailable(DependencyUnavailable):
    """ClickHouse could not be reached or failed; retry later (transient)."""

    code = "fact_store_unavailable"


class ChdbPathInUse(ApiError):
    """A second chDB path in a process that already opened one: a deployment error, not a
    request error. Run each control plane with its own path in its own process."""

    code = "chdb_path_in_use"
