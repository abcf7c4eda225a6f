"""Wiring the data plane's gateway from a data directory (``baml-studio serve dataplane``).

Layout under ``DIR`` (embedded defaults; created on first use)::

    dataplane.json                 optional: {"public_base_url", "bucket", "limits": {...},
                                   "gateway": {...}, "s3": {...}} — S3 replaces the directory
                                   bucket (S3 then notifies its own queue)
    environments.json              provisioned environments (tokens mint adds to it)
    keys/publisher-keys.json       the local stand-in for the control plane's token keys (0600)
    keys/presign.key               HMAC secret of the directory bucket's presigned URLs (0600)
    buckets/<bucket>/              the directory bucket
    queue/projection.sqlite3       the SQLite projection queue; the directory bucket sends the S3
                                   event JSON of every meta segment and value pack to it
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.gateway.app import AsgiApp, create_app
from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import GatewayConfig, PublisherLimits
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.tokens import KeyRingFile, PublisherTokenVerifier
from baml_studio.objectstore import open_object_store
from baml_studio.objectstore.config import DirectoryBucketConfig, S3Config
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.notifications import NotifyingSink
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.queue.config import SqliteQueueConfig
from baml_studio.queue.errors import QueueError
from baml_studio.queue.port import QueueSender
from baml_studio.queue.sqlite import SqliteQueue

log = logging.getLogger(__name__)

DEFAULT_BUCKET = "evidence"
SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class DataplaneConfig:
    """Everything ``serve dataplane`` needs, read once from the data directory."""

    data_dir: Path
    """The data directory (layout in the module docstring)."""

    public_base_url: str
    """Base URL uploaders use to reach this gateway (presigned URLs of the directory bucket)."""

    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    """HTTP limits and the publisher configuration."""

    bucket: str = DEFAULT_BUCKET
    """Bucket name (directory bucket, or the S3 bucket when ``s3`` is not set)."""

    s3: S3Config | None = None
    """When set, S3 replaces the directory bucket and no local queue is fed."""

    @property
    def keys_path(self) -> Path:
        return self.data_dir / "keys" / "publisher-keys.json"

    @property
    def environments_path(self) -> Path:
        return self.data_dir / "environments.json"

    @property
    def queue_config(self) -> SqliteQueueConfig:
        return SqliteQueueConfig(path=self.data_dir / "queue" / "projection.sqlite3")


def load_dataplane_config(data_dir: Path, *, host: str, port: int) -> DataplaneConfig:
    """The configuration in ``DIR/dataplane.json`` (all optional) over the embedded defaults."""
    path = data_dir / "dataplane.json"
    raw: dict[str, Any] = json.loads(path.read_text("utf-8")) if path.exists() else {}
    unknown = sorted(set(raw) - {"public_base_url", "bucket", "limits", "gateway", "s3"})
    if unknown:
        raise ValueError(f"{path}: unknown settings {unknown}")
    limits = PublisherLimits.from_dict(raw.get("limits", {}))
    gateway = GatewayConfig(limits=limits, **raw.get("gateway", {}))
    s3 = S3Config(**raw["s3"]) if "s3" in raw else None
    return DataplaneConfig(
        data_dir=data_dir,
        public_base_url=raw.get("public_base_url", f"http://{host}:{port}"),
        gateway=gateway,
        bucket=raw.get("bucket", DEFAULT_BUCKET),
        s3=s3,
    )


def read_or_create_secret(path: Path) -> bytes:
    """The secret in ``path``, created (0600, atomically, race-free) on first use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        secret = path.read_bytes()
        if len(secret) < SECRET_BYTES:
            raise ValueError(f"{path} holds {len(secret)} bytes; delete it to regenerate") from None
        return secret
    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret


class QueueNotifier:
    """The directory bucket's ``on_created`` hook: S3 event JSON for meta segments and packs.

    The object is durable before this runs; a queue failure is logged (the replay tool enqueues
    what was lost) and does not fail the upload.
    """

    def __init__(self, bucket: str, queue: QueueSender) -> None:
        self._bucket = bucket
        self._sink = NotifyingSink(queue)

    def __call__(self, info: ObjectInfo) -> None:
        try:
            message_id = self._sink.on_object_created(self._bucket, info)
        except QueueError as exc:
            log.error("notification for key=%s not sent: %s", info.key, type(exc).__name__)
            return
        if message_id is not None:
            log.info("notified key=%s message_id=%s", info.key, message_id)


@dataclass
class Dataplane:
    """A wired gateway: the ASGI app and what it owns."""

    app: AsgiApp
    gateway: Gateway
    store: ObjectStore
    queue: SqliteQueue | None
    keys: KeyRingFile
    environments: EnvironmentsFile

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close()


def open_dataplane(config: DataplaneConfig) -> Dataplane:
    """Open the store (and queue) the configuration names and build the app."""
    keys = KeyRingFile(config.keys_path)
    keys.load_or_create()
    environments = EnvironmentsFile(config.environments_path)
    verifier = PublisherTokenVerifier(keys.load, leeway_seconds=config.gateway.token_leeway_seconds)
    queue: SqliteQueue | None = None
    bucket: DirectoryBucket | None = None
    store: ObjectStore
    if config.s3 is not None:
        store = open_object_store(config.s3)  # boto3 is imported only here
    else:
        queue = SqliteQueue.open(config.queue_config)
        bucket = DirectoryBucket(
            DirectoryBucketConfig(
                root=config.data_dir / "buckets",
                bucket=config.bucket,
                presign_base_url=config.public_base_url,
                signing_secret=read_or_create_secret(config.data_dir / "keys" / "presign.key"),
            ),
            on_created=QueueNotifier(config.bucket, queue),
        )
        store = bucket
    gateway = Gateway(store, verifier, environments, config.gateway)
    return Dataplane(create_app(gateway, bucket=bucket), gateway, store, queue, keys, environments)
