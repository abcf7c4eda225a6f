"""One query as the coordinator runs it, in the shape both entry points share.

``POST /v1/query`` streams a :class:`QueryRun`'s lines to the caller; a background job
(:mod:`.jobs`) writes the same lines to a result object and reports the run's progress. A run is
created by :meth:`baml_studio.coordinator.service.Coordinator.start`, which authenticates the
scope, binds the snapshot and plans the query before it returns (so a 4xx is raised there, as an
:class:`~baml_studio.apierrors.ApiError`); after that, every failure ends the lines with a typed
``queryOutcome`` instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from baml_studio.apierrors import BadRequest

Mode = Literal["interactive", "background"]
Phase = Literal["planning", "resident", "private", "merging", "writing"]
PHASES: tuple[Phase, ...] = ("planning", "resident", "private", "merging", "writing")
QUERY_FIELDS = frozenset(
    {"sql", "parameters", "catalog_version", "budget", "mode", "environment_id"}
)
BUDGET_FIELDS = ("max_wall_ms", "max_result_rows", "max_result_bytes", "max_private_bytes_read")
BUDGET_CEILING = 2**62
"""A budget above this is no bound at all, and is taken as this: openapi.yaml sets no maximum,
and a larger one (``max_result_rows`` 2**64) became a LIMIT ClickHouse cannot represent."""


@dataclass(frozen=True, slots=True)
class RequestBudget:
    """``QueryBudget`` of openapi.yaml."""

    max_wall_ms: int
    max_result_rows: int
    max_result_bytes: int
    max_private_bytes_read: int

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in BUDGET_FIELDS}


@dataclass(frozen=True, slots=True)
class QueryRequest:
    """``ExecuteQueryRequest`` of openapi.yaml, validated."""

    sql: str
    parameters: tuple[tuple[str, Any], ...]
    """``(type, value)`` pairs bound to ``$1``, ``$2`` …"""
    catalog_version: str
    budget: RequestBudget
    mode: Mode = "interactive"
    environment_id: str | None = None

    @staticmethod
    def from_json(body: object) -> QueryRequest:
        """The request, or :class:`BadRequest` (400 ``invalid_request``) naming the field."""
        if not isinstance(body, Mapping):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - QUERY_FIELDS)
        if unknown:
            raise BadRequest(f"unknown request fields {unknown}; allowed: {sorted(QUERY_FIELDS)}")
        missing = sorted({"sql", "parameters", "catalog_version", "budget"} - set(body))
        if missing:
            raise BadRequest(f"missing request fields {missing}")
        sql, version = body["sql"], body["catalog_version"]
        if not isinstance(sql, str) or not sql:
            raise BadRequest("sql must be a non-empty string")
        if not isinstance(version, str) or not version:
            raise BadRequest("catalog_version must be a non-empty string")
        parameters = body["parameters"]
        if not isinstance(parameters, list):
            raise BadRequest("parameters must be an array of {type, value}")
        bound: list[tuple[str, Any]] = []
        for i, p in enumerate(parameters):
            if not isinstance(p, Mapping) or set(p) != {"type", "value"}:
                raise BadRequest(f"parameters[{i}] must be an object with exactly type and value")
            if not isinstance(p["type"], str):
                raise BadRequest(f"parameters[{i}].type must be a string")
            bound.append((p["type"], p["value"]))
        budget = body["budget"]
        if not isinstance(budget, Mapping) or set(budget) != set(BUDGET_FIELDS):
            raise BadRequest(f"budget must be an object with exactly {list(BUDGET_FIELDS)}")
        for name in BUDGET_FIELDS:
            value = budget[name]
            least = 0 if name == "max_private_bytes_read" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise BadRequest(f"budget.{name} must be an integer >= {least}")
        mode = body.get("mode", "interactive")
        if mode not in ("interactive", "background"):
            raise BadRequest("mode must be interactive or background")
        environment = body.get("environment_id")
        if environment is not None and (not isinstance(environment, str) or not environment):
            raise BadRequest("environment_id must be a non-empty string")
        return QueryRequest(
            sql,
            tuple(bound),
            version,
            RequestBudget(*(min(int(budget[name]), BUDGET_CEILING) for name in BUDGET_FIELDS)),
            mode,
            environment,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sql": self.sql,
            "parameters": [{"type": t, "value": v} for t, v in self.parameters],
            "catalog_version": self.catalog_version,
            "budget": self.budget.to_json(),
            "mode": self.mode,
        }
        if self.environment_id is not None:
            out["environment_id"] = self.environment_id
        return out


class QueryRun(Protocol):
    """A started query: its bound snapshot, its NDJSON lines and its progress."""

    @property
    def snapshot(self) -> dict[str, Any]:
        """The ``QueryExecutionSnapshot`` (``catalogVersion``, ``generation``,
        ``lanceVersion``, ``snapshotId``) bound when the run started."""

    @property
    def rows_so_far(self) -> int: ...

    @property
    def progress(self) -> tuple[Phase, float]:
        """The phase and the estimated fraction done (0..1)."""

    def keep(self) -> None:
        """Lease the bound snapshot's versions for the run's whole wall budget from now (a
        queued background job is kept so while it waits; its wall budget runs from its first
        line). Raises :class:`~baml_studio.apierrors.ApiError` when the lease cannot be
        written."""

    def lines(self) -> Iterator[str]:
        """NDJSON lines without newline: one JSON object per result row, then exactly one
        ``{"queryOutcome": …}``. Iterate once. Stopping early (closing the iterator) cancels."""

    def cancel(self) -> None:
        """Stop at the next row (thread-safe); the outcome becomes ``cancelled``."""

    def outcome(self) -> dict[str, Any] | None:
        """The ``QueryOutcome`` once the lines have ended, else None."""


def row_line(row: Mapping[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def outcome_line(outcome: Mapping[str, Any]) -> str:
    return json.dumps({"queryOutcome": outcome}, separators=(",", ":"), ensure_ascii=False)
