"""Wiring the projector from a data-plane directory (``baml-studio projector --data DIR``).

The projector reads the same ``DIR`` as ``baml-studio serve dataplane`` (``dataplane.json``):
the directory bucket and the SQLite projection queue under ``DIR`` (embedded defaults), or S3 and
SQS when ``dataplane.json`` names them. It calls the control plane at ``control_plane_url`` with a
workload token, and keeps the Lance datasets of each scope under ``derived_root``:
``DIR/derived/v1/<tenant>/<project>/<environment>/`` for the directory bucket (Lance needs a plain
path; the directory bucket's own layout is not one), ``s3://<bucket>/derived/v1/<tenant>/…`` on
S3 (same code, ``storage_options`` from the S3 settings).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from baml_studio.gateway.config import Scope
from baml_studio.gateway.service import (
    DataplaneConfig,
    directory_bucket,
    make_sqs_client,
    read_or_create_secret,
)
from baml_studio.objectstore import open_object_store
from baml_studio.objectstore.config import S3Config
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.fragment_keys import FragmentKeys
from baml_studio.projector.lance_store import DEFAULT_KEY_CACHE_KEYS, PrivateStore
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.queue.port import Queue
from baml_studio.queue.sqlite import SqliteQueue
from baml_studio.queue.sqs import SqsQueue

DERIVED_PREFIX = "derived/v1"


DEFAULT_SILENCE_S = 3600.0
"""A stream silent this long has its open executions closed by the sweep."""
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
"""Lance versions younger than this are kept by compaction."""


@dataclass(frozen=True, slots=True)
class ProjectorConfig:
    dataplane: DataplaneConfig
    """The data plane the projector serves (bucket, queue), as ``serve dataplane`` reads it."""

    control_plane_url: str
    """Base URL of the control plane's workload API."""

    workload_token: str | Callable[[], str] = field(repr=False)
    """Workload JWT (or a callable returning the current one)."""

    derived_root: str | None = None
    """Root of the Lance datasets; default ``DIR/derived/v1`` or ``s3://<bucket>/derived/v1``."""

    worker: WorkerConfig = field(default_factory=WorkerConfig)
    """Retry backoff, partition size, batch concurrency."""

    sweep_interval_s: float = 300.0
    """How often the service runs the sweep (0: never)."""

    silence_limit_s: float = DEFAULT_SILENCE_S
    """A stream whose newest meta object is older than this is closed by the sweep."""

    compact_interval_s: float = 3600.0
    """How often the service runs index building and compaction (0: never)."""

    version_retention_s: float = DEFAULT_RETENTION_S
    """Lance versions newer than this survive compaction (queries bind recent versions)."""

    lance_key_cache_keys: int = DEFAULT_KEY_CACHE_KEYS
    """Keys of Lance fragments the projector remembers to answer "is this key there?"
    without a scan (``FragmentKeys``, one cache shared by every scope's private store; about
    150 bytes a key; 0: scan every time)."""

    def __post_init__(self) -> None:
        if self.lance_key_cache_keys < 0:
            raise ValueError(f"lance_key_cache_keys must be >= 0, got {self.lance_key_cache_keys}")

    def root(self) -> str:
        if self.derived_root is not None:
            return self.derived_root.rstrip("/")
        s3 = self.dataplane.s3
        if s3 is not None:
            return f"s3://{s3.bucket}/{DERIVED_PREFIX}"
        return str(self.dataplane.data_dir / "derived" / "v1")


def lance_storage_options(s3: S3Config | None) -> dict[str, str] | None:
    """Lance (object_store) options for the S3 settings of ``dataplane.json``."""
    if s3 is None:
        return None
    options = {"aws_region": s3.region}
    if s3.endpoint_url:
        options["aws_endpoint"] = s3.endpoint_url
        if s3.endpoint_url.startswith("http://"):
            options["allow_http"] = "true"
    if s3.access_key_id:
        options["aws_access_key_id"] = s3.access_key_id
    if s3.secret_access_key:
        options["aws_secret_access_key"] = s3.secret_access_key
    if s3.path_style:
        options["aws_virtual_hosted_style_request"] = "false"
    return options


class Projector:
    """The projector's stores and clients, opened once; close it when done."""

    def __init__(
        self,
        config: ProjectorConfig,
        store: ObjectStore,
        queue: Queue,
        control: ControlClient,
    ) -> None:
        self.config = config
        self.store = store
        self.queue = queue
        self.control = control
        self._private: dict[Scope, PrivateStore] = {}
        self._keys = FragmentKeys(config.lance_key_cache_keys)  # one budget for all scopes
        self._lock = threading.Lock()

    def private_store(self, scope: Scope) -> PrivateStore:
        with self._lock:
            store = self._private.get(scope)
            if store is None:
                uri = scope_root(self.config, scope)
                options = lance_storage_options(self.config.dataplane.s3)
                store = PrivateStore(
                    uri,
                    storage_options=options,
                    fragment_keys=self._keys,
                )
                self._private[scope] = store
            return store

    def worker(self) -> ProjectorWorker:
        return ProjectorWorker(
            store=self.store,
            queue=self.queue,
            control=self.control,
            private_store=self.private_store,
            config=self.config.worker,
        )

    def close(self) -> None:
        self.control.close()
        close = getattr(self.queue, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> Projector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_projector(config: ProjectorConfig) -> Projector:
    """Open the bucket, queue and control client ``config`` names."""
    dataplane = config.dataplane
    queue: Queue
    store: ObjectStore
    if dataplane.s3 is not None:
        if dataplane.sqs is None:
            raise ValueError("dataplane.json names s3 but no sqs queue for the projector")
        store = open_object_store(dataplane.s3)
        queue = SqsQueue.open(dataplane.sqs, make_sqs_client(dataplane.s3, dataplane.sqs))
    else:
        secret = read_or_create_secret(dataplane.data_dir / "keys" / "presign.key")
        queue = SqliteQueue.open(dataplane.queue_config)
        store = directory_bucket(dataplane, secret, queue)
    control = ControlClient(config.control_plane_url, config.workload_token)
    return Projector(config, store, queue, control)


def scope_root(config: ProjectorConfig, scope: Scope) -> str:
    """Where one scope's Lance datasets live."""
    return f"{config.root()}/{scope.tenant}/{scope.project}/{scope.environment}"
