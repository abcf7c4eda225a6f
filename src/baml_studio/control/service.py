"""The control plane's operations over its stores, independent of HTTP.

:class:`ControlPlane` holds the metastore, the fact store and the signing key ring, and answers
the five workload operations of ``openapi.yaml`` plus the public key set and the revocation list.
Every operation authenticates a workload token first, then derives scope from it and the
metastore: the tenant is the token's, and the environment must be assigned to the token's
deployment. A scope in a header or body is compared against that and refused with 403 when it
differs; it never widens what the token reaches.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import anyio
import pyarrow as pa
from pydantic import ValidationError

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    Conflict,
    DependencyUnavailable,
    Forbidden,
    NotFound,
    TooManyRequests,
)
from baml_studio.control import snapshots
from baml_studio.control.config import ControlConfig
from baml_studio.control.facts import (
    BatchKey,
    BatchResult,
    FactStore,
    FactStoreConfig,
    relation_select_sql,
)
from baml_studio.control.identity import (
    ControlKeys,
    TokenVerifier,
    WorkloadIdentity,
    bearer_token,
    jwks_document,
    revocations_document,
)
from baml_studio.control.ingest import BatchRequest, parse_batch
from baml_studio.control.metastore import Metastore, MetastoreError, MetastoreUnavailable
from baml_studio.control.model import TokenKind
from baml_studio.control.models import (
    CreateQuerySnapshotRequest,
    ProjectionErasureRequest,
    ResidentQueryRequest,
)
from baml_studio.control.resident import (
    QueryParameter,
    ResidentBudget,
    budget_settings,
    compile_resident,
)
from baml_studio.control.schemas import CATALOG_VERSIONS, schema_digest, schema_set
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRing

WARM_UP_SQL = (
    "WITH t AS (SELECT execution_id, row_number() OVER (ORDER BY started_at) AS r "
    "FROM threads WHERE status = 'completed') "
    "SELECT c.fqn, count(*) AS n, max(c.duration_ns) AS d, min(e.kind) AS k "
    "FROM calls c JOIN t ON t.execution_id = c.execution_id "
    "LEFT JOIN errors e ON e.execution_id = c.execution_id AND e.error_id = c.error_id "
    "WHERE c.started_at >= CAST('2026-01-01 00:00:00' AS TIMESTAMP) AND c.fqn IN ('a', 'b') "
    "AND c.status IS NOT NULL AND c.fqn LIKE 'a%' GROUP BY c.fqn ORDER BY n DESC LIMIT 10"
)
"""What :meth:`ControlPlane.warm_up` compiles: the constructs the coordinator's resident
subqueries use (CTE, joins, window, aggregates, IN, LIKE, a timestamp cast)."""

log = logging.getLogger(__name__)
T = TypeVar("T")

BATCH_CHECK_THREADS = 4
"""Projection batches checked at once (token, body, scope: CPU work; with hundreds of
threads at it, Python threads mostly wait for each other's GIL)."""

GENERATION_METADATA_KEY = b"baml.projection_generation"
CATALOG_METADATA_KEY = b"baml.catalog_version"
SNAPSHOT_METADATA_KEY = b"baml.snapshot_id"


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer: status, JSON body or raw bytes, extra headers."""

    status: int
    json: dict[str, Any] | None = None
    body: bytes | None = None
    media_type: str = "application/json"
    headers: Mapping[str, str] | None = None


INLINE_CHECK_BYTES = 256 * 1024
"""Largest compressed batch body checked on the event loop; larger ones (up to the 64 MiB
limit, 512 MiB decompressed) are checked on a worker thread so the loop keeps serving."""


class TtlCache:
    """Answers remembered for ``ttl_s`` seconds (0: never), at most ``capacity`` of them;
    only answers are cached, never refusals (an exception passes through uncached).

    :meth:`peek` with a ``refresh`` reloads an answer in the background once less than
    ``refresh_ahead`` of its life is left (one reload per key at a time), so a key in steady
    use never expires: without it, every expiry sent the batches of the moment to a worker
    thread for the full checks (about one in ten batches at a second's life, measured through
    ``benchmarks/batch_route.py``). An answer is still never used more than ``ttl_s`` after
    its load; a reload that raises forgets the answer, so the next use runs the full checks
    and gets the refusal."""

    def __init__(
        self,
        ttl_s: float,
        *,
        capacity: int = 10_000,
        clock: Callable[[], float],
        refresh_ahead: float = 0.5,
    ) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self.refresh_ahead = refresh_ahead
        self._clock = clock
        self._entries: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._reloading: set[Any] = set()
        self._reloader: ThreadPoolExecutor | None = None

    def get(self, key: Any, load: Callable[[], T]) -> T:
        if self.ttl_s > 0:
            with self._lock:
                found = self._entries.get(key)
            if found is not None and found[0] > self._clock():
                return cast(T, found[1])
        value = load()
        self.put(key, value)
        return value

    def peek(self, key: Any, refresh: Callable[[], Any] | None = None) -> Any | None:
        """The remembered answer for ``key`` if it is still fresh, else None (nothing loaded
        here). With ``refresh``, an answer in the last ``refresh_ahead`` of its life is
        reloaded by ``refresh`` on a background thread meanwhile."""
        if self.ttl_s <= 0:
            return None
        now = self._clock()
        with self._lock:
            found = self._entries.get(key)
            if found is None or found[0] <= now:
                return None
            if (
                refresh is not None
                and found[0] - now < self.ttl_s * self.refresh_ahead
                and key not in self._reloading
            ):
                self._reloading.add(key)
                if self._reloader is None:
                    self._reloader = ThreadPoolExecutor(1, thread_name_prefix="batch-checks")
                self._reloader.submit(self._reload, key, refresh)
        return found[1]

    def _reload(self, key: Any, load: Callable[[], Any]) -> None:
        try:
            value = load()
        except Exception as exc:  # a refusal now (or no answer): the next use checks in full
            # the key may hold a bearer token: never logged
            log.debug("a background reload failed (%s); the answer is forgotten", exc)
            with self._lock:
                self._entries.pop(key, None)
        else:
            self.put(key, value)
        finally:
            with self._lock:
                self._reloading.discard(key)

    def put(self, key: Any, value: Any) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.capacity:
                now = self._clock()
                self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
                if len(self._entries) >= self.capacity:
                    self._entries.clear()
            self._entries[key] = (self._clock() + self.ttl_s, value)

    def close(self) -> None:
        """Wait for the reloads under way and queued (each one check), then stop the
        reloading thread (a later :meth:`peek` starts another)."""
        with self._lock:
            reloader, self._reloader = self._reloader, None
        if reloader is not None:
            reloader.shutdown(wait=True)


@dataclass(frozen=True, slots=True)
class AcceptedBatch:
    """A projection batch that passed every check but the fact store's."""

    key: BatchKey
    table: pa.Table
    content_digest: str


def _validate(model: Any, body: bytes) -> Any:
    try:
        return model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        problems = [
            {"field": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise BadRequest(
            f"the body does not match {model.__name__} in openapi.yaml",
            details={"errors": problems[:20]},
        ) from None


class ControlPlane:
    def __init__(
        self,
        config: ControlConfig,
        metastore: Metastore,
        facts: FactStore,
        keys: Callable[[], KeyRing],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.metastore = metastore
        self.facts = facts
        self.keys = keys
        self.clock = clock
        self.verifier = TokenVerifier(keys, metastore, clock=clock)
        self._batch_checks = TtlCache(config.batch_auth_cache_s, clock=time.monotonic)
        self._checking = threading.BoundedSemaphore(BATCH_CHECK_THREADS)
        facts.admit_with(self._admit_generation)
        self._queries = threading.BoundedSemaphore(config.max_concurrent_queries)
        for version in CATALOG_VERSIONS:
            with self._metastore():
                metastore.register_catalog_version(version, schema_digest(version))

    @classmethod
    def open(cls, config: ControlConfig) -> ControlPlane:
        """Open (and create or migrate) every store under ``config``."""
        config.data_dir.mkdir(parents=True, exist_ok=True)
        keys = ControlKeys(config.keys_path)
        keys.ring()
        metastore = Metastore.open(config.metastore_url)
        facts = FactStore.connect(
            FactStoreConfig(dsn=config.facts_dsn, database=config.facts_database)
        )
        facts.ensure_schema()
        return cls(config, metastore, facts, keys.ring)

    def close(self) -> None:
        self._batch_checks.close()
        self.facts.close()
        self.metastore.close()

    # -- identity and scope -------------------------------------------------------------

    @contextmanager
    def _metastore(self) -> Iterator[None]:
        try:
            yield
        except MetastoreUnavailable as exc:
            raise DependencyUnavailable(
                "the metastore is unavailable; retry later", code="metastore_unavailable"
            ) from exc

    def workload(self, headers: Mapping[str, str]) -> WorkloadIdentity:
        with self._metastore():
            identity = self.verifier.verify(bearer_token(headers), TokenKind.WORKLOAD)
        return identity

    def scope_for(self, identity: WorkloadIdentity, project: str, environment: str) -> Scope:
        """The scope (token tenant, ``project``, ``environment``) if the token reaches it."""
        try:
            scope = Scope(identity.tenant, project, environment)
        except ValueError as exc:
            raise BadRequest(f"invalid scope: {exc}", code="invalid_scope") from exc
        with self._metastore():
            try:
                served = self.metastore.deployment_serves(identity.deployment, scope)
            except MetastoreError:
                served = False
        if not served:
            raise Forbidden(
                "the workload token does not reach this project and environment",
                code="scope_forbidden",
            )
        return scope

    def _scope_from_body(
        self, identity: WorkloadIdentity, tenant: str, project: str, environment: str
    ) -> Scope:
        if tenant != identity.tenant:
            raise Forbidden(
                "the scope names another tenant than the token's", code="scope_forbidden"
            )
        return self.scope_for(identity, project, environment)

    def _active_generation(self, scope: Scope) -> str:
        with self._metastore():
            try:
                return self.metastore.active_generation(scope)
            except MetastoreError as exc:
                raise Forbidden(
                    "the environment is not provisioned", code="scope_forbidden"
                ) from exc

    # -- operations ---------------------------------------------------------------------

    def projection_schemas(self, headers: Mapping[str, str], catalog_version: str) -> Answer:
        self.workload(headers)
        if catalog_version not in CATALOG_VERSIONS:
            raise NotFound(
                f"catalog version {catalog_version!r} is not registered; "
                f"registered: {list(CATALOG_VERSIONS)}",
                code="unknown_catalog_version",
            )
        return Answer(200, schema_set(catalog_version), headers={"Cache-Control": "max-age=3600"})

    def put_batch(self, headers: Mapping[str, str], batch_id: str, body: bytes) -> Answer:
        """``PUT /projection-batches/{batch_id}``: :meth:`accept_batch` (at most
        :data:`BATCH_CHECK_THREADS` callers at once), then :meth:`write_batch` (mostly
        waiting for the batch's group: the HTTP route runs hundreds of these at once)."""
        return self.write_batch(self._accept_checked(headers, batch_id, body))

    async def put_batch_async(
        self, headers: Mapping[str, str], batch_id: str, body: bytes
    ) -> Answer:
        """:meth:`put_batch` on an event loop (the HTTP route): the checks run on the loop when
        the token's and scope's answers are cached (no metastore read), else on a worker thread
        as in :meth:`put_batch`; the write awaits the batch's group
        (:meth:`FactStore.put_batch_async`). Same outcomes."""
        accepted = self.accept_batch_cached(headers, batch_id, body)
        if accepted is None:
            accepted = await anyio.to_thread.run_sync(self._accept_checked, headers, batch_id, body)
        key = accepted.key
        result = await self.facts.put_batch_async(key, accepted.table, accepted.content_digest)
        return self._batch_answer(accepted, result)

    def _accept_checked(
        self, headers: Mapping[str, str], batch_id: str, body: bytes
    ) -> AcceptedBatch:
        with self._checking:
            return self.accept_batch(headers, batch_id, body)

    def accept_batch_cached(
        self, headers: Mapping[str, str], batch_id: str, body: bytes
    ) -> AcceptedBatch | None:
        """:meth:`accept_batch` when the token's and the scope's checks are both remembered
        (so it reads no metastore) and the body is at most :data:`INLINE_CHECK_BYTES` (so
        decoding it keeps the event loop busy briefly); None otherwise (the caller runs
        :meth:`accept_batch` on a worker thread). The same refusals, in the same order."""
        if len(body) > INLINE_CHECK_BYTES:
            return None
        token = bearer_token(headers)
        identity = self._batch_checks.peek(("token", token), lambda: self.workload(headers))
        if identity is None or identity.expires_at <= self.clock():
            return None
        request = parse_batch(headers, batch_id, body, self.config.batch_limits)
        scope = self._batch_checks.peek(
            _scope_check(identity, request),
            lambda: self.scope_for(identity, request.project_id, request.environment_id),
        )
        return None if scope is None else _accepted(scope, batch_id, request)

    def accept_batch(self, headers: Mapping[str, str], batch_id: str, body: bytes) -> AcceptedBatch:
        """Every check of a batch that needs no fact store: the token, the body (digest,
        schema, rows) and the scope (the generation is checked when the batch's group is
        written). CPU work: :meth:`put_batch` lets a few threads at it at once."""
        token = bearer_token(headers)
        identity = self._batch_checks.get(("token", token), lambda: self.workload(headers))
        if identity.expires_at <= self.clock():
            identity = self.workload(headers)  # refused as expired
        request = parse_batch(headers, batch_id, body, self.config.batch_limits)
        scope = self._batch_checks.get(
            _scope_check(identity, request),
            lambda: self.scope_for(identity, request.project_id, request.environment_id),
        )
        # the generation is checked by the fact store when it writes the batch's group (one
        # metastore read per group) or answers it from its cache: see _admit_generation
        return _accepted(scope, batch_id, request)

    def _admit_generation(self, scope: Scope, generation: str) -> ApiError | None:
        """A batch may be written only into the scope's active generation (read now)."""
        active = self._active_generation(scope)
        if generation == active:
            return None
        return Conflict(
            f"generation {generation!r} is not the active generation of the scope",
            code="inactive_generation",
            details={"active_generation": active},
        )

    def write_batch(self, accepted: AcceptedBatch) -> Answer:
        """Make an accepted batch visible (or find it visible): mostly waiting for the fact
        store's coalesced group, so the route gives it many threads."""
        result = self.facts.put_batch(accepted.key, accepted.table, accepted.content_digest)
        return self._batch_answer(accepted, result)

    def _batch_answer(self, accepted: AcceptedBatch, result: BatchResult) -> Answer:
        key = accepted.key
        log.info(
            "projection batch batch_id=%s root_id=%s relation=%s generation=%s state=%s rows=%d",
            key.batch_id,
            key.root_id,
            key.relation,
            key.generation,
            result.state,
            result.row_count,
        )
        return Answer(
            201 if result.state == "created" else 200,
            {
                "batch_id": key.batch_id,
                "root_id": key.root_id,
                "state": "visible",
                "generation": key.generation,
                "row_count": result.row_count,
                "content_digest": accepted.content_digest,
            },
        )

    def erase(self, headers: Mapping[str, str], body: bytes) -> Answer:
        identity = self.workload(headers)
        if not 1 <= len(headers.get("idempotency-key", "")) <= 256:
            raise BadRequest(
                "the Idempotency-Key header is required (1–256 characters)",
                code="missing_header",
                details={"header": "Idempotency-Key"},
            )
        request: ProjectionErasureRequest = _validate(ProjectionErasureRequest, body)
        root_ids = [r.root for r in request.root_ids]
        if len(set(root_ids)) != len(root_ids):
            raise BadRequest("root_ids must be unique", code="duplicate_root_ids")
        project = headers.get("x-baml-project-id")
        environment = headers.get("x-baml-environment-id")
        if project is not None or environment is not None:
            scopes = [self.scope_for(identity, project or "", environment or "")]
        else:
            with self._metastore():
                served = self.metastore.deployment_environments(identity.deployment)
            scopes = [s for s in served if s.tenant == identity.tenant]
        for scope in scopes:
            self.facts.erase(scope, request.generation, root_ids)
        log.info(
            "projection erasure roots=%d generation=%s scopes=%d",
            len(root_ids),
            request.generation,
            len(scopes),
        )
        return Answer(
            200, {"state": "deleted", "generation": request.generation, "root_ids": root_ids}
        )

    def snapshot(self, headers: Mapping[str, str], body: bytes) -> Answer:
        identity = self.workload(headers)
        request: CreateQuerySnapshotRequest = _validate(CreateQuerySnapshotRequest, body)
        scope = self._scope_from_body(
            identity,
            request.scope.tenant_id,
            request.scope.project_id,
            request.scope.environment_id,
        )
        self._check_catalog_version(request.catalog_version)
        generation = self._active_generation(scope)
        snap = snapshots.issue(
            self.keys(),
            scope,
            request.catalog_version,
            generation,
            self.config.snapshot_ttl_s,
            now=self.clock(),
        )
        return Answer(200, snap.as_json(), headers={"Cache-Control": "no-store"})

    def _check_catalog_version(self, version: str) -> None:
        if version not in CATALOG_VERSIONS:
            raise BadRequest(
                f"catalog version {version!r} is not registered; "
                f"registered: {list(CATALOG_VERSIONS)}",
                code="unknown_catalog_version",
            )

    def warm_up(self) -> None:
        """Load, before the first request, what it would otherwise load while its client
        waits: the resident compiler's parser, optimizer and generator (a query over every
        public relation is compiled, not run), and one pooled caller-query client of the fact
        store (``SELECT 1``). The ASGI app calls this at startup; it changes latency only."""
        database = self.config.facts_database
        warm = Scope("warm", "warm", "warm")
        try:
            compile_resident(
                WARM_UP_SQL,
                [],
                relation_sql=lambda name: relation_select_sql(name, database, warm, "warm"),
            )
            self.facts.query_arrow("SELECT 1 AS one", {})
        except ApiError as exc:  # the first request will meet (and report) the same failure
            log.warning("warm-up failed code=%s", exc.code)

    def resident_query(self, headers: Mapping[str, str], body: bytes) -> Answer:
        identity = self.workload(headers)
        request: ResidentQueryRequest = _validate(ResidentQueryRequest, body)
        scope, generation, catalog_version, snapshot_id = self._bind(identity, headers, request)
        if not self._queries.acquire(blocking=False):
            raise TooManyRequests(
                f"{self.config.max_concurrent_queries} resident queries are already running",
                code="too_many_queries",
            )
        try:
            table = self._run(request, scope, generation)
        finally:
            self._queries.release()
        metadata = {
            GENERATION_METADATA_KEY: generation.encode(),
            CATALOG_METADATA_KEY: catalog_version.encode(),
        }
        answer_headers = {"X-Baml-Projection-Generation": generation, "Cache-Control": "no-store"}
        if snapshot_id is not None:
            metadata[SNAPSHOT_METADATA_KEY] = snapshot_id.encode()
            answer_headers["X-Baml-Snapshot-Id"] = snapshot_id
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return Answer(
            200,
            body=sink.getvalue(),
            media_type="application/vnd.apache.arrow.stream",
            headers=answer_headers,
        )

    def _bind(
        self,
        identity: WorkloadIdentity,
        headers: Mapping[str, str],
        request: ResidentQueryRequest,
    ) -> tuple[Scope, str, str, str | None]:
        if (request.snapshot_id is None) == (request.generation is None):
            raise BadRequest("set exactly one of snapshot_id or generation", code="invalid_request")
        if request.snapshot_id is not None:
            snap = snapshots.resolve(self.keys(), request.snapshot_id, now=self.clock())
            scope = self._scope_from_body(
                identity, snap.scope.tenant, snap.scope.project, snap.scope.environment
            )
            return scope, snap.generation, snap.catalog_version, request.snapshot_id
        if request.catalog_version is None:
            raise BadRequest("catalog_version is required with generation", code="invalid_request")
        self._check_catalog_version(request.catalog_version)
        project = headers.get("x-baml-project-id")
        environment = headers.get("x-baml-environment-id")
        if not project or not environment:
            raise BadRequest(
                "a query by generation names its scope in X-Baml-Project-Id and "
                "X-Baml-Environment-Id (or use a snapshot_id)",
                code="missing_header",
            )
        scope = self.scope_for(identity, project, environment)
        generation = request.generation or ""
        with self._metastore():
            known = self.metastore.generation_exists(scope, generation)
        if not known:
            raise BadRequest(
                f"generation {request.generation!r} does not exist in this scope",
                code="unknown_generation",
            )
        return scope, generation, request.catalog_version, None

    def _run(self, request: ResidentQueryRequest, scope: Scope, generation: str) -> pa.Table:
        database = self.config.facts_database
        compiled = compile_resident(
            request.sql,
            [QueryParameter(p.type, p.value) for p in request.parameters],
            relation_sql=lambda name: relation_select_sql(name, database, scope, generation),
        )
        budget = ResidentBudget(
            max_wall_ms=request.budget.max_wall_ms,
            max_rows_read=request.budget.max_rows_read,
            max_bytes_read=request.budget.max_bytes_read,
            max_result_rows=request.budget.max_result_rows,
            max_result_bytes=request.budget.max_result_bytes,
        )
        settings = {**compiled.settings, **budget_settings(budget, self.config.resident_caps)}
        started = time.perf_counter()
        table = self.facts.query_arrow(compiled.sql, settings)
        log.info(
            "resident query relations=%s generation=%s rows=%d ms=%.1f",
            ",".join(sorted(compiled.relations)),
            generation,
            table.num_rows,
            (time.perf_counter() - started) * 1000,
        )
        return table

    def jwks(self) -> Answer:
        return Answer(200, jwks_document(self.keys()), headers={"Cache-Control": "max-age=300"})

    def revocations(self) -> Answer:
        with self._metastore():
            document = revocations_document(self.metastore)
        return Answer(200, document, headers={"Cache-Control": "max-age=60"})


__all__ = ["Answer", "ApiError", "ControlPlane"]


def _scope_check(identity: WorkloadIdentity, request: BatchRequest) -> tuple[str, ...]:
    """The key under which a deployment's reach of a batch's scope is remembered."""
    return (
        "scope",
        identity.deployment,
        identity.tenant,
        request.project_id,
        request.environment_id,
    )


def _accepted(scope: Scope, batch_id: str, request: BatchRequest) -> AcceptedBatch:
    key = BatchKey(
        scope,
        request.generation,
        batch_id,
        request.root_id,
        request.relation,
        request.partition,
    )
    return AcceptedBatch(key, request.table, request.content_digest)
