"""Joining the query coordinator to the data plane's process (``serve dataplane``).

:func:`attach_coordinator` builds, over an opened :class:`~baml_studio.gateway.service.Dataplane`
and its configuration: a :class:`~baml_studio.projector.control_client.ControlClient` (the data
plane's workload token), per-scope :class:`~baml_studio.projector.lance_store.PrivateStore`s at
the projector's Lance root, the :class:`~.service.Coordinator`, user-token verification
(:class:`~.auth.UserTokenAuth`: the control plane's key set the gateway already fetched, or the
local ring), the job manager (``DIR/coordinator/jobs.sqlite``, results in the bucket under
``tmp/query-results/``), and replaces the dataplane's app with one that also serves
``POST /v1/query``, the four job routes and the two erasure routes (``DIR/erasures/``, see
docs/erasure.md), wrapped in CORS for the Studio origins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from starlette.requests import Request

from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.app import query_routes, with_cors
from baml_studio.coordinator.app_jobs import job_routes
from baml_studio.coordinator.auth import UserTokenAuth
from baml_studio.coordinator.config import CoordinatorConfig
from baml_studio.coordinator.jobs import JobManager
from baml_studio.coordinator.jobs_store import JobStore
from baml_studio.coordinator.run import QueryRequest, QueryRun
from baml_studio.coordinator.service import Coordinator
from baml_studio.erasure.app import erasure_routes
from baml_studio.erasure.manager import ErasureManager
from baml_studio.gateway.app import create_app
from baml_studio.gateway.config import Scope
from baml_studio.gateway.service import Dataplane, DataplaneConfig
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.fragment_keys import FragmentKeys
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.service import ProjectorConfig, lance_storage_options, scope_root


@dataclass(frozen=True, slots=True)
class CoordinatorSetup:
    workload_token: str | Callable[[], str] = field(repr=False)
    """The data plane's workload JWT for the control plane (or a callable returning it)."""

    derived_root: str | None = None
    """Root of the Lance datasets (default: the projector's, ``DIR/derived/v1``)."""

    config: CoordinatorConfig = field(default_factory=CoordinatorConfig)


@dataclass
class AttachedCoordinator:
    coordinator: Coordinator
    auth: UserTokenAuth
    jobs: JobManager


def attach_coordinator(
    dataplane: Dataplane, config: DataplaneConfig, setup: CoordinatorSetup
) -> AttachedCoordinator:
    if config.control_plane_url is None:
        raise ValueError("the coordinator needs the control plane: set control_plane_url")
    control = ControlClient(config.control_plane_url, setup.workload_token)
    projector_config = ProjectorConfig(
        config, config.control_plane_url, setup.workload_token, derived_root=setup.derived_root
    )
    stores = _PrivateStores(projector_config)
    coordinator = Coordinator(control, stores.get, objects=dataplane.store, config=setup.config)
    if dataplane.key_set is not None:
        auth = UserTokenAuth.remote(dataplane.key_set)
    else:
        auth = UserTokenAuth.local(config.data_dir / "keys")
    job_store = JobStore(config.data_dir / "coordinator" / "jobs.sqlite")

    def background(request: QueryRequest, identity: UserIdentity) -> QueryRun:
        return coordinator.start(request, identity, mode="background")

    jobs = JobManager(
        job_store,
        dataplane.store,
        background,
        workers=setup.config.job_workers,
        ttl_s=setup.config.job_ttl_s,
    )

    def authenticate_request(request: Request) -> UserIdentity:
        return auth.authenticate({k.lower(): v for k, v in request.headers.items()})

    def authenticate(headers: Mapping[str, str]) -> UserIdentity:
        return auth.authenticate(headers)

    erasures = ErasureManager.open(
        config.data_dir / "erasures", dataplane.store, control, stores.get,
        on_values_erased=lambda scope: coordinator.forget_values(),
    )  # fmt: skip
    routes = [
        *query_routes(coordinator.start, authenticate),
        *job_routes(jobs, authenticate_request),
        *erasure_routes(erasures, authenticate_request),
    ]
    bucket = dataplane.store if isinstance(dataplane.store, DirectoryBucket) else None
    app = create_app(dataplane.gateway, bucket=bucket, routes=routes)
    dataplane.app = with_cors(app, setup.config.studio_origins)
    dataplane.closers += [control.close, job_store.close, jobs.close]
    return AttachedCoordinator(coordinator, auth, jobs)


class _PrivateStores:
    def __init__(self, config: ProjectorConfig) -> None:
        self._config = config
        self._stores: dict[Scope, PrivateStore] = {}
        self._keys = FragmentKeys(config.lance_key_cache_keys)  # one budget for all scopes
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> PrivateStore:
        with self._lock:
            store = self._stores.get(scope)
            if store is None:
                options = lance_storage_options(self._config.dataplane.s3)
                root = scope_root(self._config, scope)
                store = PrivateStore(root, storage_options=options, fragment_keys=self._keys)
                self._stores[scope] = store
            return store
