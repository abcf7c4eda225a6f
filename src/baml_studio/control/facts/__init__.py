"""Public facts in ClickHouse: DDL from the split table, idempotent coalesced batch writes,
erasure by root, and budgeted read-only queries (``docs/control-plane.md``, "Fact store").

``FactStore.connect(FactStoreConfig(dsn=...))`` works the same over embedded chDB
(``chdb:///abs/path``, one path per process) and a ClickHouse server (``https://…``).
"""

from baml_studio.control.facts.batch import BatchKey, BatchResult, FactStoreStats
from baml_studio.control.facts.config import FactStoreConfig, QueryCaps
from baml_studio.control.facts.ddl import relation_select_sql, schema_sql
from baml_studio.control.facts.errors import (
    BatchConflict,
    BudgetExceeded,
    ChdbPathInUse,
    FactStoreUnavailable,
    InvalidBatch,
    QueryRejected,
)
from baml_studio.control.facts.store import FactStore, FactStorePort

__all__ = [
    "BatchConflict",
    "BatchKey",
    "BatchResult",
    "BudgetExceeded",
    "ChdbPathInUse",
    "FactStore",
    "FactStoreConfig",
    "FactStorePort",
    "FactStoreStats",
    "FactStoreUnavailable",
    "InvalidBatch",
    "QueryCaps",
    "QueryRejected",
    "relation_select_sql",
    "schema_sql",
]
