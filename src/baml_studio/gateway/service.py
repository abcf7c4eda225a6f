"""Wiring the data plane's gateway from a data directory (``baml-studio serve dataplane``).

Layout under ``DIR`` (embedded defaults; created on first use)::

    dataplane.json                 optional: {"public_base_url", "bucket", "limits": {...},
                                   "gateway": {...}, "s3": {...}, "sqs": {...},
                                   "s3_notifications": "verify" | "configure" | "off"}
                                   — S3 replaces the directory bucket and notifies the SQS
                                   queue ``sqs`` names (see "S3 wiring" below)
    environments.json              provisioned environments (tokens mint adds to it)
    keys/publisher-keys.json       the local stand-in for the control plane's token keys (0600);
                                   with ``control_plane_url`` (``serve dataplane --control-plane``)
                                   the control plane's public key set and revocations replace it
    keys/presign.key               HMAC secret of the directory bucket's presigned URLs (0600;
                                   one under 32 bytes is refused with ``ConfigError``: restore
                                   it, or remove it to have a new one made)
    buckets/<bucket>/              the directory bucket
    queue/projection.sqlite3       the SQLite projection queue; the directory bucket sends the S3
                                   event JSON of every meta segment and value pack to it

S3 wiring: with ``s3`` and ``sqs`` set, S3 itself must send the event of every meta segment and
value pack to the SQS projection queue, through the two rules of
:data:`~baml_studio.objectstore.notifications.NOTIFICATION_RULES`. At start the data plane
verifies them (``"verify"``, the default: missing rules are logged and reported in
:attr:`Dataplane.notifications`; uploads still work) or installs them (``"configure"``, also
``serve dataplane --setup-s3``: :func:`setup_s3_notifications` ensures the queue and its
dead-letter queue, lets the bucket send to the queue, and puts the rules). The SQS client uses
the S3 credentials. On AWS the queue policy must allow ``sqs:SendMessage`` from
``s3.amazonaws.com`` for this bucket before S3 accepts the rules (S3 sends an
``s3:TestEvent`` to check); :func:`setup_s3_notifications` sets it unless told not to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from baml_studio.configfile import ConfigError, build, checked_value, construct, read_json_object
from baml_studio.gateway.app import AsgiApp, create_app
from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import REMOTE_HEAD_CONCURRENCY, GatewayConfig, PublisherLimits
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.tokens import KeyRingFile, PublisherTokenVerifier
from baml_studio.objectstore import open_object_store
from baml_studio.objectstore.config import DirectoryBucketConfig, S3Config, validate_bucket_name
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.dirfs import fsync_dir
from baml_studio.objectstore.errors import InvalidArgument
from baml_studio.objectstore.notifications import NotificationSetupError, NotifyingSink
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.queue.config import SqliteQueueConfig, SqsQueueConfig
from baml_studio.queue.errors import QueueError
from baml_studio.queue.port import QueueSender
from baml_studio.queue.sqlite import SqliteQueue

if TYPE_CHECKING:
    from baml_studio.control.identity_remote import RemoteKeySet

log = logging.getLogger(__name__)

DEFAULT_BUCKET = "evidence"
LOCAL_HEAD_CONCURRENCY = 1
"""The directory bucket's existence checks run in the request's thread: each is a few local
system calls, and a thread per check (16 per request) cost authorize more than it saved."""
SECRET_BYTES = 32
NotificationMode = Literal["verify", "configure", "off"]
NOTIFICATION_MODES: tuple[NotificationMode, ...] = ("verify", "configure", "off")
"""``s3_notifications`` in ``dataplane.json``: check the rules at start, install them, or skip."""
_SETTINGS = frozenset(
    {"public_base_url", "bucket", "limits", "gateway", "s3", "sqs", "s3_notifications"}
)


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

    sqs: SqsQueueConfig | None = None
    """With ``s3``: the SQS projection queue the bucket's notification rules target."""

    s3_notifications: NotificationMode = "verify"
    """With ``s3`` and ``sqs``: verify the two rules at start, install them, or skip."""

    control_plane_url: str | None = None
    """When set, publisher tokens verify with the control plane's public key set and revocation
    list (``GET /.well-known/jwks.json``, ``GET /token-revocations``, cached) instead of the
    local key file."""

    def __post_init__(self) -> None:
        if self.control_plane_url is not None and not self.control_plane_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError(
                f"control_plane_url {self.control_plane_url!r} must be an http:// or https:// URL"
            )
        if self.s3_notifications not in NOTIFICATION_MODES:
            raise ValueError(
                f"s3_notifications={self.s3_notifications!r}; use one of {NOTIFICATION_MODES}"
            )
        if self.sqs is not None and self.s3 is None:
            raise ValueError("sqs needs s3: the directory bucket feeds its own SQLite queue")

    @property
    def keys_path(self) -> Path:
        return self.data_dir / "keys" / "publisher-keys.json"

    @property
    def environments_path(self) -> Path:
        return self.data_dir / "environments.json"

    @property
    def queue_config(self) -> SqliteQueueConfig:
        return SqliteQueueConfig(path=self.data_dir / "queue" / "projection.sqlite3")


def load_dataplane_config(
    data_dir: Path,
    *,
    host: str,
    port: int,
    setup_s3: bool = False,
    control_plane_url: str | None = None,
) -> DataplaneConfig:
    """The configuration in ``DIR/dataplane.json`` (all optional) over the embedded defaults;
    ``setup_s3`` forces ``s3_notifications: "configure"``. A file that is not JSON, or holds an
    unknown setting or a value of the wrong type or range, raises
    :class:`~baml_studio.configfile.ConfigError` (a ``ValueError``) naming the file and the
    setting; an unreadable one raises ``OSError``."""
    path = data_dir / "dataplane.json"
    raw = read_json_object(path) if path.exists() else {}
    unknown = sorted(set(raw) - _SETTINGS)
    if unknown:
        raise ConfigError(f"{path} has unknown settings {unknown}; known: {sorted(_SETTINGS)}")
    source = str(path)
    limits = PublisherLimits.from_dict(raw.get("limits", {}), source=source, at="limits")
    gateway_raw = raw.get("gateway", {})
    gateway = build(GatewayConfig, gateway_raw, source, at="gateway", exclude={"limits"})
    s3 = (
        build(S3Config, raw["s3"], source, at="s3", refusals=(InvalidArgument,))
        if "s3" in raw
        else None
    )
    sqs = build(SqsQueueConfig, raw["sqs"], source, at="sqs") if "sqs" in raw else None
    if setup_s3 and (s3 is None or sqs is None):
        raise ConfigError(f'--setup-s3 needs both "s3" and "sqs" in {path}')
    bucket = checked_value(str, raw.get("bucket", DEFAULT_BUCKET), source, "bucket")
    try:
        validate_bucket_name(bucket)
    except InvalidArgument as exc:
        raise ConfigError(f"{source}: bucket: {exc}") from exc
    mode = raw.get("s3_notifications", "verify")
    public_base_url = raw.get("public_base_url", f"http://{host}:{port}")
    settings = {
        "data_dir": data_dir,
        "public_base_url": checked_value(str, public_base_url, source, "public_base_url"),
        "gateway": replace(gateway, limits=limits),
        "bucket": bucket,
        "s3": s3,
        "sqs": sqs,
        "s3_notifications": "configure"
        if setup_s3
        else checked_value(NotificationMode, mode, source, "s3_notifications"),
        "control_plane_url": control_plane_url,
    }
    return construct(DataplaneConfig, settings, source)


def read_or_create_secret(path: Path) -> bytes:
    """The presign key in ``path``, created (0600) on first use. The new key is written and
    synced under a temporary name and then linked into place, so no process ever reads a
    partial key, and of two processes creating it at once both use the one that got there
    first. A key shorter than :data:`SECRET_BYTES` (truncated, or not a key at all) raises
    :class:`~baml_studio.configfile.ConfigError` naming the file; an unreadable one,
    ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    staged = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.write(fd, secrets.token_bytes(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another process made it first: use that
            os.link(staged, path)
        fsync_dir(path.parent)
    finally:
        staged.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    secret = path.read_bytes()
    if len(secret) < SECRET_BYTES:
        raise ConfigError(
            f"{path} holds {len(secret)} bytes, not a presign key (at least {SECRET_BYTES} "
            "bytes): restore it from a backup, or remove it to have a new one made (URLs "
            "presigned with the old key then stop working)"
        )
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
    notifications: NotificationStatus | None = None
    """With S3 + SQS: the projection queue and which notification rules are missing."""

    key_set: RemoteKeySet | None = None
    """With ``control_plane_url``: the control plane's keys the publisher tokens verify with."""

    closers: list[Callable[[], None]] = field(default_factory=list)
    """Parts joined to this process later (the query coordinator), closed first."""

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        if self.queue is not None:
            self.queue.close()
        if self.key_set is not None:
            self.key_set.close()


def open_dataplane(config: DataplaneConfig, *, key_set: RemoteKeySet | None = None) -> Dataplane:
    """Open the store (and queue) the configuration names and build the app. Publisher tokens
    verify with the local key file, or with ``key_set`` (default: a :class:`RemoteKeySet` of
    ``config.control_plane_url``, when set); the dataplane closes it, and so does a failure
    here (a bad ``presign.key``, an unreachable S3), with the queue if it was opened."""
    keys = KeyRingFile(config.keys_path)
    environments = EnvironmentsFile(config.environments_path)
    if key_set is None and config.control_plane_url is not None:
        key_set = _remote_key_set(config.control_plane_url)
    queue: SqliteQueue | None = None
    try:
        if key_set is None:
            keys.load_or_create()
            verifier = PublisherTokenVerifier(
                keys.load, leeway_seconds=config.gateway.token_leeway_seconds
            )
        else:
            remote = key_set
            verifier = PublisherTokenVerifier(
                lambda: remote,
                leeway_seconds=config.gateway.token_leeway_seconds,
                is_revoked=remote.is_revoked,
            )
        bucket: DirectoryBucket | None = None
        store: ObjectStore
        notifications: NotificationStatus | None = None
        if config.s3 is not None:
            store = open_object_store(config.s3)  # boto3 is imported only here
            notifications = wire_s3_notifications(config, store)
        else:
            # read before the queue is opened, so a bad key leaves nothing open
            secret = read_or_create_secret(config.data_dir / "keys" / "presign.key")
            queue = SqliteQueue.open(config.queue_config)
            store = bucket = directory_bucket(config, secret, queue)
        gateway_config = config.gateway
        if gateway_config.head_concurrency is None:
            checks = LOCAL_HEAD_CONCURRENCY if bucket is not None else REMOTE_HEAD_CONCURRENCY
            gateway_config = replace(gateway_config, head_concurrency=checks)
        gateway = Gateway(store, verifier, environments, gateway_config)
        app = create_app(gateway, bucket=bucket)
        return Dataplane(app, gateway, store, queue, keys, environments, notifications, key_set)
    except BaseException:  # nothing opened here is left open: the dataplane would close it
        if queue is not None:
            queue.close()
        if key_set is not None:
            key_set.close()
        raise


def directory_bucket(config: DataplaneConfig, secret: bytes, queue: QueueSender) -> DirectoryBucket:
    """The embedded bucket under ``DATA/buckets``: presigned URLs signed with ``secret``, its
    object-created events sent to ``queue`` (what the gateway and the projector both open)."""
    return DirectoryBucket(
        DirectoryBucketConfig(
            root=config.data_dir / "buckets",
            bucket=config.bucket,
            presign_base_url=config.public_base_url,
            signing_secret=secret,
        ),
        on_created=QueueNotifier(config.bucket, queue),
    )


def _remote_key_set(url: str) -> RemoteKeySet:
    """The control plane's keys and revocations, fetched once now so an unreachable control
    plane shows in the log at start (uploads get 503 until it answers)."""
    from baml_studio.control.identity_remote import RemoteKeySet

    key_set = RemoteKeySet(url)
    if not key_set.refresh():
        log.warning("control plane %s did not serve its keys; uploads get 503 until it does", url)
    return key_set


# --- S3 wiring: the bucket's notification rules and the SQS projection queue -----------------


@dataclass(frozen=True, slots=True)
class NotificationStatus:
    """What the S3 wiring found (or set): the projection queue and any missing rules."""

    bucket: str
    queue_url: str
    dead_letter_url: str | None
    queue_arn: str
    missing: tuple[str, ...]
    """Ids of the rules of ``NOTIFICATION_RULES`` with no equivalent rule on the bucket."""

    @property
    def ok(self) -> bool:
        return not self.missing


def wire_s3_notifications(config: DataplaneConfig, store: ObjectStore) -> NotificationStatus | None:
    """Verify or install the rules as ``config.s3_notifications`` says; log what is missing."""
    if config.s3 is None or config.s3_notifications == "off":
        return None
    if config.sqs is None:
        log.warning('S3 without an "sqs" queue: no projection notifications are checked')
        return None
    s3_client = getattr(store, "client", None)
    if s3_client is None:
        raise TypeError(f"{type(store).__name__} has no boto3 client to configure")
    sqs_client = make_sqs_client(config.s3, config.sqs)
    bucket = config.s3.bucket
    if config.s3_notifications == "configure":
        status = setup_s3_notifications(s3_client, sqs_client, bucket, config.sqs)
    else:
        status = verify_s3_notifications(s3_client, sqs_client, bucket, config.sqs)
    if status.missing:
        log.error(
            "bucket=%s lacks notification rules %s for queue=%s; the projector will not see "
            "those uploads. Run `baml-studio setup s3-notifications` or serve with --setup-s3",
            bucket,
            list(status.missing),
            config.sqs.name,
        )
    else:
        log.info("bucket=%s notifies queue=%s", bucket, config.sqs.name)
    return status


def make_sqs_client(s3: S3Config, sqs: SqsQueueConfig) -> Any:
    """An SQS client for ``sqs`` with the S3 configuration's credentials (``Any``: boto3)."""
    from baml_studio.queue.sqs import make_client

    credentials = (
        {"aws_access_key_id": s3.access_key_id, "aws_secret_access_key": s3.secret_access_key}
        if s3.access_key_id is not None and s3.secret_access_key is not None
        else None
    )
    return make_client(sqs.region, sqs.endpoint_url, credentials)


def setup_s3_notifications(
    s3_client: Any,
    sqs_client: Any,
    bucket: str,
    queue: SqsQueueConfig,
    *,
    queue_policy: bool = True,
) -> NotificationStatus:
    """Ensure the queue and its dead-letter queue (redrive after
    ``queue.settings.max_receive_count`` receives), let ``bucket`` send to the queue when
    ``queue_policy`` (this replaces the queue's policy; AWS needs it before it saves the rules),
    install the two rules, then verify them. Safe to run again."""
    from baml_studio.objectstore.s3_notifications import allow_bucket_to_send, configure
    from baml_studio.queue.sqs import ensure_queues

    url, dlq_url, arn = _queue_step(
        queue.name, ensure_queues, sqs_client, queue.name, queue.settings
    )
    if queue_policy:
        allow_bucket_to_send(sqs_client, url, arn, bucket)
    configure(s3_client, bucket, arn)
    missing = missing_notification_rules(s3_client, bucket, arn)
    return NotificationStatus(bucket, url, dlq_url, arn, missing)


def verify_s3_notifications(
    s3_client: Any, sqs_client: Any, bucket: str, queue: SqsQueueConfig
) -> NotificationStatus:
    """Look the queue up (never create it) and report which of the two rules are missing."""
    from baml_studio.queue.sqs import find_dead_letter_url, wrap_botocore_error

    def lookup() -> tuple[str, str, str | None]:
        try:
            url = str(sqs_client.get_queue_url(QueueName=queue.name)["QueueUrl"])
            attributes = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except _aws_errors() as exc:
            raise wrap_botocore_error(exc, queue.name) from exc
        return url, str(attributes["Attributes"]["QueueArn"]), find_dead_letter_url(sqs_client, url)

    url, arn, dlq_url = _queue_step(queue.name, lookup)
    missing = missing_notification_rules(s3_client, bucket, arn)
    return NotificationStatus(bucket, url, dlq_url, arn, missing)


def missing_notification_rules(s3_client: Any, bucket: str, queue_arn: str) -> tuple[str, ...]:
    """Ids of our two rules that ``bucket`` lacks for ``queue_arn``, matched by content (queue,
    ``s3:ObjectCreated:*``, prefix and suffix), not by id. Empty when both are in place."""
    from baml_studio.objectstore.s3_notifications import notification_rules

    try:
        current = s3_client.get_bucket_notification_configuration(Bucket=bucket)
    except _aws_errors() as exc:
        status = int(
            getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
        )
        raise NotificationSetupError(
            f"reading the notification rules of bucket {bucket!r}: {exc}",
            transient=status == 0 or status >= 500,  # 0: no answer at all
        ) from exc
    present = {_rule_shape(rule) for rule in current.get("QueueConfigurations", [])}
    wanted = notification_rules(queue_arn)
    return tuple(str(rule["Id"]) for rule in wanted if _rule_shape(rule) not in present)


def _rule_shape(rule: Mapping[str, Any]) -> tuple[str, frozenset[str], frozenset[tuple[str, str]]]:
    filters = rule.get("Filter", {}).get("Key", {}).get("FilterRules", [])
    pairs = frozenset((str(f.get("Name", "")).lower(), str(f.get("Value", ""))) for f in filters)
    return str(rule.get("QueueArn", "")), frozenset(rule.get("Events", [])), pairs


def _queue_step(name: str, operation: Callable[..., Any], *args: Any) -> Any:
    try:
        return operation(*args)
    except QueueError as exc:
        raise NotificationSetupError(
            f"projection queue {name!r}: {exc}", transient=exc.transient
        ) from exc


def _aws_errors() -> tuple[type[Exception], ...]:
    import botocore.exceptions  # type: ignore[import-untyped]  # reason: botocore ships no types

    return (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
