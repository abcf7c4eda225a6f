"""The query coordinator: ``POST /v1/query`` and background jobs run through :class:`Coordinator`.

:meth:`Coordinator.start` authorises the scope, binds parameters and one snapshot
(:mod:`.snapshot`) and returns a :class:`Run`. The run then classifies and executes
(:mod:`.execute`): a public-only query goes to the control plane whole, as one resident
subquery, and reads no Lance; a private or mixed query is planned by the local engine (the same
DataFusion engine as ``baml-studio query --store``) over a :class:`~.source.CoordinatorSource`
that prunes with the query's public predicates and reads Lance only for the candidates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from baml_studio.apierrors import BadRequest, DependencyUnavailable
from baml_studio.control.identity import UserIdentity
from baml_studio.control.schemas import CATALOG_VERSIONS
from baml_studio.coordinator.auth import UserTokenAuth
from baml_studio.coordinator.cache import ReadCache
from baml_studio.coordinator.config import CoordinatorConfig
from baml_studio.coordinator.execute import Run, check_sql, warm_planner
from baml_studio.coordinator.params import bind
from baml_studio.coordinator.run import Mode, QueryRequest
from baml_studio.coordinator.shared import SharedCaches
from baml_studio.coordinator.snapshot import BoundSnapshot, SnapshotBinder
from baml_studio.coordinator.source import SourceStats
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import (
    ControlPlaneNotFound,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
)
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.resident_client import ResidentBudget, resident_query

log = logging.getLogger(__name__)


class Coordinator:
    def __init__(
        self,
        control: ControlClient,
        private_store: Callable[[Scope], PrivateStore],
        *,
        objects: ObjectStore | None = None,
        config: CoordinatorConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.control = control
        self.private_store = private_store
        self.objects = objects
        self.binder = SnapshotBinder(control, private_store)
        self.cache = (
            ReadCache(self.config.cache_dir, self.config.cache_bytes)
            if self.config.cache_dir is not None
            else ReadCache.disabled()
        )
        self.shared = SharedCaches(self.config.decoded_values)
        """Datasets by version, marker sets, value bodies: reused across queries."""
        self.stats = SourceStats()
        """Totals over every query (instrumentation for tests and operators)."""
        self.resident_hook: Callable[[str], None] | None = None
        """Called with the SQL of every resident subquery before it is sent (tests capture)."""
        self._clock = clock
        warm_planner()
        self._lock = threading.Lock()

    def start(
        self, request: QueryRequest, identity: UserIdentity, *, mode: Mode = "interactive"
    ) -> Run:
        """A started run; raises ApiError (400/403/503) for what refuses the query up front."""
        if request.catalog_version not in CATALOG_VERSIONS:
            raise BadRequest(
                f"unknown catalog_version {request.catalog_version!r}; "
                f"supported: {list(CATALOG_VERSIONS)}",
                code="unknown_catalog_version",
            )
        scope = UserTokenAuth.scope_for(identity, request.environment_id)
        sql = bind(request.sql, request.parameters)
        if mode == "background":
            check_sql(sql)
        request = self.capped(request, mode)
        snapshot = self.bind(
            scope, request.catalog_version, hold_s=request.budget.max_wall_ms / 1000
        )
        log.info(
            "query started tenant=%s project=%s environment=%s mode=%s generation=%s lance=%d",
            scope.tenant, scope.project, scope.environment, mode,
            snapshot.generation, snapshot.lance_version,
        )  # fmt: skip
        return Run(self, snapshot, sql, request, mode)

    def forget_values(self) -> None:
        """Drop every cached value body (after an erasure deleted values)."""
        self.cache.clear()
        self.shared.values.clear()
        self.shared.decoded.clear()

    def capped(self, request: QueryRequest, mode: Mode) -> QueryRequest:
        """``request`` with its wall budget capped at the configured longest query (a bound
        snapshot's versions are leased from compaction for that long)."""
        cap = (
            self.config.max_wall_ms if mode == "interactive" else self.config.max_background_wall_ms
        )
        if request.budget.max_wall_ms <= cap:
            return request
        log.info("budget.max_wall_ms %d capped at %d", request.budget.max_wall_ms, cap)
        return replace(request, budget=replace(request.budget, max_wall_ms=cap))

    def bind(self, scope: Scope, catalog_version: str, *, hold_s: float = 0.0) -> BoundSnapshot:
        try:
            return self.binder.bind(scope, catalog_version, hold_s=hold_s)
        except ControlPlaneRefused as exc:
            if exc.status in (401, 403):
                raise DependencyUnavailable(
                    f"the control plane refused the coordinator's workload token: {exc}",
                    code="control_plane_refused",
                ) from exc
            if isinstance(exc, ControlPlaneNotFound):  # the server's --control-plane URL
                raise DependencyUnavailable(
                    f"the coordinator's control plane has no snapshot route: {exc}",
                    code="dependency_unavailable",
                ) from exc
            raise BadRequest(f"the control plane refused the snapshot: {exc}") from exc
        except (ControlPlaneUnavailable, BamlStudioError, OSError) as exc:
            raise DependencyUnavailable(
                f"cannot bind a snapshot: {exc}", code="dependency_unavailable"
            ) from exc

    def renew(self, snapshot: BoundSnapshot, hold_s: float) -> None:
        """Lease a bound snapshot's versions for ``hold_s`` more seconds from now; raises
        503 ``dependency_unavailable`` when the lease cannot be written."""
        try:
            self.binder.renew(snapshot, hold_s)
        except (BamlStudioError, OSError) as exc:
            raise DependencyUnavailable(
                f"cannot lease the snapshot's versions: {exc}", code="dependency_unavailable"
            ) from exc

    def resident(
        self, snapshot: BoundSnapshot, sql: str, *, max_wall_ms: int, max_rows: int
    ) -> pa.Table:
        """One resident subquery under ``snapshot``'s generation (raises the client's errors)."""
        if self.resident_hook is not None:
            self.resident_hook(sql)
        budget = ResidentBudget(
            max_wall_ms=max(1, min(max_wall_ms, self.config.resident_timeout_ms)),
            max_result_rows=max_rows,
        )
        result = resident_query(
            self.control,
            snapshot.scope,
            sql,
            generation=snapshot.generation,
            catalog_version=snapshot.catalog_version,
            budget=budget,
        )
        self.stats.add(resident_queries=1)
        return result.table
