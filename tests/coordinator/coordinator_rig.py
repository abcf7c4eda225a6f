"""A projected workload behind a real control plane, and a coordinator over it.

:func:`coordinator_over` runs the projector e2e rig (real publisher, gateway, control plane on
127.0.0.1, worker, Lance under tmp_path), projects every execution, and yields a
:class:`CoordinatorRig`: the :class:`~baml_studio.coordinator.service.Coordinator`, a user
identity of the scope, the local store the evidence came from, and helpers to run a query both
ways. Every resident subquery's SQL is captured in ``resident_sql``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from projector_e2e_rig import Ingest, ingest_path
from projector_fixtures import SCOPE

from baml_studio.catalog import LocalStoreSource
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.config import CoordinatorConfig
from baml_studio.coordinator.run import QueryRequest, RequestBudget
from baml_studio.coordinator.service import Coordinator
from baml_studio.query import QueryBudgets, QueryEngine

BUDGET = RequestBudget(
    max_wall_ms=60_000,
    max_result_rows=100_000,
    max_result_bytes=256 << 20,
    max_private_bytes_read=1 << 30,
)


def identity(environments: tuple[str, ...] = (SCOPE.environment,)) -> UserIdentity:
    return UserIdentity(
        SCOPE.tenant, SCOPE.project, environments, False, "tok_test", "kid", 0, 2**31
    )


def request(sql: str, **changes: Any) -> QueryRequest:
    fields: dict[str, Any] = {
        "sql": sql,
        "parameters": (),
        "catalog_version": "v1",
        "budget": BUDGET,
    }
    fields.update(changes)
    return QueryRequest(**fields)


@dataclass
class Answer:
    rows: list[dict[str, Any]]
    outcome: dict[str, Any]
    run: Any = None


@dataclass
class CoordinatorRig:
    ingest: Ingest
    coordinator: Coordinator
    resident_sql: list[str] = field(default_factory=list)

    def remote(self, sql: str, **changes: Any) -> Answer:
        run = self.coordinator.start(request(sql, **changes), identity())
        lines = [json.loads(line) for line in run.lines()]
        outcome = lines[-1]["queryOutcome"]
        assert all("queryOutcome" not in line for line in lines[:-1])
        return Answer(lines[:-1], outcome, run)

    def local(self, sql: str) -> Answer:
        engine = QueryEngine(
            LocalStoreSource(self.ingest.store_root),
            QueryBudgets(max_wall_s=60, max_result_rows=100_000),
        )
        result = engine.execute(sql)
        rows = list(result)
        return Answer(rows, result.outcome())


@contextmanager
def coordinator_over(
    tmp_path: Path,
    chdb_dsn: str,
    database: str,
    store: Path,
    *,
    project: bool = True,
    config: CoordinatorConfig | None = None,
) -> Iterator[CoordinatorRig]:
    with ingest_path(tmp_path, chdb_dsn, database, store) as ingest:
        if project:
            ingest.worker.drain()
        coordinator = Coordinator(
            ingest.client,
            lambda scope: ingest.private,
            objects=ingest.dataplane.store,
            config=config or CoordinatorConfig(cache_dir=tmp_path / "cache"),
        )
        rig = CoordinatorRig(ingest, coordinator)
        coordinator.resident_hook = rig.resident_sql.append
        yield rig


@dataclass
class Served:
    url: str
    token: str
    """A user token of the scope, issued by the control plane."""
    jobs: Any
    runs: list[Any]
    """Every run the HTTP routes started, in order."""


@contextmanager
def serve_coordinator(
    rig: CoordinatorRig, tmp_path: Path, *, origins: tuple[str, ...] = ()
) -> Iterator[Served]:
    """``POST /v1/query`` and the job routes over ``rig``'s coordinator, on 127.0.0.1, with
    user tokens verified by the control plane's published keys."""
    from projector_control_rig import serve
    from starlette.applications import Starlette

    from baml_studio.control.identity import TokenIssuer
    from baml_studio.control.identity_remote import RemoteKeySet
    from baml_studio.coordinator.app import query_routes, with_cors
    from baml_studio.coordinator.app_jobs import job_routes
    from baml_studio.coordinator.auth import UserTokenAuth
    from baml_studio.coordinator.jobs import JobManager
    from baml_studio.coordinator.jobs_store import JobStore

    control = rig.ingest.control
    token = (
        TokenIssuer(control.keys, control.metastore)
        .issue_user(SCOPE.tenant, SCOPE.project, [SCOPE.environment], erasure=True)
        .token
    )
    key_set = RemoteKeySet(rig.ingest.client._base)  # reason: the rig's control-plane URL
    auth = UserTokenAuth.remote(key_set, owned=True)
    runs: list[Any] = []

    def start(request: QueryRequest, who: UserIdentity) -> Any:
        run = rig.coordinator.start(request, who)
        runs.append(run)
        return run

    def background(request: QueryRequest, who: UserIdentity) -> Any:
        run = rig.coordinator.start(request, who, mode="background")
        runs.append(run)
        return run

    jobs = JobManager(JobStore(tmp_path / "jobs" / "jobs.sqlite"), rig.ingest.dataplane.store,
                      background)  # fmt: skip
    routes = [
        *query_routes(start, auth.authenticate),
        *job_routes(
            jobs, lambda r: auth.authenticate({k.lower(): v for k, v in r.headers.items()})
        ),
    ]
    app = with_cors(Starlette(routes=routes), origins)
    try:
        with serve(app) as url:
            yield Served(url, token, jobs, runs)
    finally:
        jobs.close()
        auth.close()


def private_strings(store_root: Path, min_length: int = 4) -> set[str]:
    """Text that must never reach the control plane: the string leaves of every value, source
    paths and thread names of the local store — less any text a public column also holds
    (a value may repeat a function name)."""
    from baml_studio.catalog.schema import RELATIONS, Visibility

    source = LocalStoreSource(store_root)
    tables = source.tables([r.name for r in RELATIONS if not r.internal], None)
    public: set[str] = set()
    private: set[str] = set()
    for relation in RELATIONS:
        if relation.internal:
            continue
        table = tables[relation.name]
        for column in relation.columns:
            if column.visibility is Visibility.PUBLIC:
                public.update(_texts(table[column.name].to_pylist()))
            elif column.name not in ("args", "output", "error", "value"):
                private.update(_texts(table[column.name].to_pylist()))
    engine = QueryEngine(source, QueryBudgets(max_result_rows=1_000_000))
    for sql in ("SELECT args, output, error FROM calls", "SELECT value FROM errors"):
        for row in engine.execute(sql):
            for value in row.values():
                private.update(_leaves(value))
    return {s for s in private - public if len(s) >= min_length}


def _texts(values: list[Any]) -> set[str]:
    out: set[str] = set()
    for v in values:
        if isinstance(v, str):
            out.add(v)
        elif isinstance(v, list):
            out |= _texts(v)
    return out


def _leaves(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {leaf for v in value.values() for leaf in _leaves(v)} | {
            k for k in value if isinstance(k, str) and len(k) > 8
        }
    if isinstance(value, list):
        return {leaf for v in value for leaf in _leaves(v)}
    return set()
