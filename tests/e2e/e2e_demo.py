"""The demo store the end-to-end tests query, and helpers to query it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baml_studio.catalog.local import LocalStoreSource
from baml_studio.query import QueryEngine
from baml_studio.workload import WorkloadReport


class Demo:
    def __init__(self, root: Path, report: WorkloadReport) -> None:
        self.root = root
        self.report = report
        self.engine = QueryEngine(LocalStoreSource(root))

    def query(self, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        result = self.engine.execute(sql)
        rows = list(result)
        return rows, result.outcome()

    def rows(self, sql: str) -> list[dict[str, Any]]:
        rows, outcome = self.query(sql)
        assert outcome["resultState"] == "complete", outcome
        return rows

    def execution_of(self, request_id: str) -> str:
        (row,) = self.rows(
            "SELECT execution_id FROM calls WHERE edge_kind = 'root' "
            f"AND args['request_id'] = '{request_id}'"
        )
        return str(row["execution_id"])
