"""Resident queries from the data plane: ``POST /resident-queries`` through a ControlClient.

The projector's control client (``control_client.py``) covers projection; this module adds
the one read the replay tool needs, the public facts themselves, over the same transport
(bearer token, ``X-Baml-Request-Id``, retries and error mapping of ``ControlClient._call``):

* :func:`resident_query` runs one SQL query (catalog relations, public columns) under a
  snapshot id or a generation and returns the Arrow table the control plane streams back;
* :func:`projected_root_ids` pages ``SELECT DISTINCT execution_id FROM threads_v1`` by key
  (``execution_id > $1 ORDER BY execution_id LIMIT n``): the root ids with facts at the
  scope's active generation.

Errors are those of the client (:mod:`.errors`): ``ControlPlaneRefused`` for a 4xx (a
compiler code, ``unknown_generation``, ``budget_exceeded``…), ``ControlPlaneUnavailable``
when the control plane does not answer or answers something that is not a valid Arrow stream
(read as the control plane reads a batch body: :func:`baml_studio.arrowipc.read_stream`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pyarrow as pa

from baml_studio.arrowipc import InvalidArrowStream, read_stream
from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import ARROW_STREAM, ControlClient
from baml_studio.projector.errors import ControlPlaneUnavailable

GENERATION_HEADER = "X-Baml-Projection-Generation"
DEFAULT_PAGE_ROWS = 100_000
ROOT_IDS_SQL = (
    "SELECT DISTINCT execution_id FROM threads_v1 WHERE execution_id > $1 "
    "ORDER BY execution_id LIMIT {limit}"
)


@dataclass(frozen=True, slots=True)
class ResidentBudget:
    """A ``ResidentQueryBudget``; the control plane clamps each limit to its own caps."""

    max_wall_ms: int = 30_000
    max_rows_read: int = 2_000_000_000
    max_bytes_read: int = 200 * 1024**3
    max_result_rows: int = 10_000_000
    max_result_bytes: int = 1024**3


@dataclass(frozen=True, slots=True)
class ResidentResult:
    table: pa.Table
    generation: str
    """The generation that served the query (``X-Baml-Projection-Generation``)."""


@dataclass(frozen=True, slots=True)
class ProjectedRoots:
    generation: str
    """The active generation the root ids were read at."""
    root_ids: frozenset[str]


def resident_query(
    control: ControlClient,
    scope: Scope,
    sql: str,
    parameters: Sequence[tuple[str, object]] = (),
    *,
    snapshot_id: str | None = None,
    generation: str | None = None,
    catalog_version: str = "v1",
    budget: ResidentBudget | None = None,
) -> ResidentResult:
    """Run ``sql`` with positional ``parameters`` (``(type, value)``, e.g. ``("string", "x")``)
    in ``scope`` under exactly one of ``snapshot_id`` (from :meth:`ControlClient.snapshot`)
    or ``generation`` (of ``catalog_version``)."""
    if (snapshot_id is None) == (generation is None):
        raise ValueError("give exactly one of snapshot_id or generation")
    body: dict[str, object] = {
        "sql": sql,
        "parameters": [{"type": kind, "value": value} for kind, value in parameters],
        "budget": asdict(budget or ResidentBudget()),
    }
    if snapshot_id is not None:
        body["snapshot_id"] = snapshot_id
    else:
        body["generation"] = generation
        body["catalog_version"] = catalog_version
    headers = {
        "Accept": f"{ARROW_STREAM}, application/json",
        "X-Baml-Project-Id": scope.project,
        "X-Baml-Environment-Id": scope.environment,
    }
    response = control._call(  # reason: the client's transport (token, retries, error mapping)
        "POST",
        "/resident-queries",
        "resident_query",
        headers=headers,
        json_body=body,
        context=f"scope={scope.tenant}/{scope.project}/{scope.environment}",
    )
    try:
        table = read_stream(response.content)  # validated: a damaged one could crash its user
    except InvalidArrowStream as exc:
        raise ControlPlaneUnavailable(
            f"resident_query: the control plane answered {response.status_code} without a "
            f"valid Arrow stream: {exc}"
        ) from exc
    served = response.headers.get(GENERATION_HEADER) or generation or ""
    return ResidentResult(table, served)


def projected_root_ids(
    control: ControlClient,
    scope: Scope,
    *,
    catalog_version: str = "v1",
    page_rows: int = DEFAULT_PAGE_ROWS,
) -> ProjectedRoots:
    """Every ``execution_id`` with ``threads_v1`` facts at the scope's active generation.

    A fresh snapshot names the active generation; the pages are then read by that generation
    (a snapshot expires after 60 s, a long listing must not), so every page reads the same
    generation even if an operator bumps it meanwhile.
    """
    if page_rows < 1:
        raise ValueError(f"page_rows must be at least 1, got {page_rows}")
    generation: str = control.snapshot(scope, catalog_version)["generation"]
    sql = ROOT_IDS_SQL.format(limit=page_rows)
    budget = ResidentBudget(max_result_rows=page_rows)
    found: set[str] = set()
    after = ""
    while True:
        page = resident_query(
            control,
            scope,
            sql,
            [("string", after)],
            generation=generation,
            catalog_version=catalog_version,
            budget=budget,
        ).table
        if page.num_columns != 1:
            raise ControlPlaneUnavailable(
                f"resident_query: expected one execution_id column, got {page.column_names}"
            )
        ids = [str(v) for v in page.column(0).to_pylist() if v is not None]
        found.update(ids)
        if len(ids) < page_rows:
            return ProjectedRoots(generation, frozenset(found))
        after = max(ids)


__all__ = [
    "ProjectedRoots",
    "ResidentBudget",
    "ResidentResult",
    "projected_root_ids",
    "resident_query",
]
