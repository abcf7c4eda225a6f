"""Bucket notifications: the S3 event JSON the projection queue carries, and the two rules.

Only meta segments and value packs notify: keys under ``evidence/v1/`` ending in
``.bamlmeta.zst`` or ``.bamlpack.zst`` (:data:`NOTIFICATION_RULES`), matched literally on the raw
key as S3 matches its prefix and suffix filters. The directory bucket emits the same event JSON
that S3 delivers (:func:`s3_event`, through a :class:`NotifyingSink`); S3 itself is configured by
:mod:`baml_studio.objectstore.s3_notifications`. The projector reads either with
:func:`parse_s3_event`.

Keys in events are URL-encoded as S3 encodes them: ``quote_plus`` with ``/`` kept, so a space
becomes ``+`` and a ``+`` becomes ``%2B``. :func:`parse_s3_event` returns decoded keys.

Exception tree::

    BamlStudioError
    └── NotificationError
        ├── MalformedS3Event          a body that is not an S3 event notification we can read
        │   └── UnsupportedS3Event    a well-formed S3 record that is not ObjectCreated
        ├── InvalidEventField         ``s3_event`` got an argument S3 could not have sent
        └── NotificationSetupError    configuring S3 notifications failed (``s3_notifications``)

Every error here is terminal except a :class:`NotificationSetupError` marked ``transient``. A
projector sends a message whose body raises :class:`MalformedS3Event` to the dead-letter queue.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import quote_plus, unquote_plus

from baml_studio.format.errors import BamlStudioError
from baml_studio.jsontext import parse_json
from baml_studio.queue.port import QueueSender

EVIDENCE_PREFIX = "evidence/v1/"
META_SUFFIX = ".bamlmeta.zst"
PACK_SUFFIX = ".bamlpack.zst"
EVENT_VERSION = "2.1"
"""The ``eventVersion`` S3 documents for ObjectCreated events (ministack 1.5.33 sends 2.6)."""

MAX_EVENT_BYTES = 1_048_576
"""Bodies larger than this are rejected unread (an S3 event is about 1 KiB)."""

_MAX_WRAPPING = 2
_T = TypeVar("_T")


class NotificationError(BamlStudioError):
    """A bucket notification could not be built, read or configured."""

    transient = False


class MalformedS3Event(NotificationError, ValueError):
    """The body is not an S3 event notification this code can read."""


class UnsupportedS3Event(MalformedS3Event):
    """A well-formed S3 record for an event other than ObjectCreated."""


class InvalidEventField(NotificationError, ValueError):
    """An argument to :func:`s3_event` that no S3 event could carry."""


class NotificationSetupError(NotificationError):
    """Configuring the bucket's notification rules failed; ``transient`` when worth retrying."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class NotificationRule:
    """One S3 notification rule: ObjectCreated events for keys with this prefix and suffix."""

    id: str
    """The rule's ``Id``; S3 puts it in each event's ``s3.configurationId``."""

    prefix: str
    suffix: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.prefix) and key.endswith(self.suffix)


NOTIFICATION_RULES = (
    NotificationRule("baml-evidence-meta", EVIDENCE_PREFIX, META_SUFFIX),
    NotificationRule("baml-evidence-pack", EVIDENCE_PREFIX, PACK_SUFFIX),
)
"""The two rules; nothing else in the bucket notifies."""


def matching_rule(key: str) -> NotificationRule | None:
    """The rule that makes ``key`` notify, or ``None``."""
    return next((rule for rule in NOTIFICATION_RULES if rule.matches(key)), None)


def notification_rule_matches(key: str) -> bool:
    """Whether creating ``key`` notifies the projection queue."""
    return matching_rule(key) is not None


def encode_event_key(key: str) -> str:
    """The key as S3 writes it into an event: ``quote_plus`` keeping ``/``."""
    return quote_plus(key, safe="/")


def decode_event_key(encoded: str) -> str:
    """Inverse of :func:`encode_event_key`; invalid UTF-8 escapes raise ``UnicodeDecodeError``."""
    return unquote_plus(encoded, errors="strict")


@dataclass(frozen=True, slots=True)
class ObjectCreated:
    """One ObjectCreated record of an S3 event notification."""

    bucket: str
    key: str
    """Decoded key."""
    size: int
    etag: str
    """Entity tag without quotes."""
    version_id: str | None
    """``None`` for an unversioned bucket."""
    sequencer: str | None
    """Hex string ordering events for one key (compare after left-padding to equal length)."""
    event_name: str = "ObjectCreated:Put"
    event_time: str = ""


def s3_event(
    bucket: str,
    key: str,
    size: int,
    etag: str,
    version_id: str | None,
    sequencer: str | None,
    event_time: datetime,
    *,
    region: str = "us-east-1",
    event_name: str = "ObjectCreated:Put",
    configuration_id: str | None = None,
    request_id: str | None = None,
    principal_id: str = "baml-studio",
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """The standard S3 event notification for one created object, as S3 would deliver it.

    ``configuration_id`` defaults to the id of the rule the key matches (``""`` if none).
    ``versionId`` and ``sequencer`` are omitted when ``None``, as S3 omits them.
    """
    _check_event_fields(bucket, key, size, etag, event_time, event_name)
    if configuration_id is None:
        rule = matching_rule(key)
        configuration_id = rule.id if rule else ""
    obj: dict[str, Any] = {"key": encode_event_key(key), "size": size, "eTag": etag.strip('"')}
    if version_id is not None:
        obj["versionId"] = version_id
    if sequencer is not None:
        obj["sequencer"] = sequencer
    request_id = request_id or uuid.uuid4().hex[:16].upper()
    record = {
        "eventVersion": EVENT_VERSION,
        "eventSource": "aws:s3",
        "awsRegion": region,
        "eventTime": format_event_time(event_time),
        "eventName": event_name,
        "userIdentity": {"principalId": principal_id},
        "requestParameters": {"sourceIPAddress": source_ip},
        "responseElements": {"x-amz-request-id": request_id, "x-amz-id-2": request_id},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": configuration_id,
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": principal_id},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": obj,
        },
    }
    return {"Records": [record]}


def format_event_time(when: datetime) -> str:
    """``2026-09-10T12:00:00.123Z``: UTC with milliseconds, as S3 writes ``eventTime``."""
    if when.tzinfo is None:
        raise InvalidEventField(f"event_time {when!r} has no time zone; pass an aware UTC time")
    utc = when.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _check_event_fields(
    bucket: str, key: str, size: int, etag: str, event_time: datetime, event_name: str
) -> None:
    if not isinstance(bucket, str) or not bucket:
        raise InvalidEventField(f"bucket must be a non-empty string, got {bucket!r}")
    if not isinstance(key, str) or not key:
        raise InvalidEventField(f"key must be a non-empty string, got {key!r}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventField(f"key {key!r} is not valid Unicode: {exc}") from exc
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidEventField(f"size must be a non-negative int, got {size!r}")
    if not isinstance(etag, str):
        raise InvalidEventField(f"etag must be a string, got {etag!r}")
    if not isinstance(event_time, datetime):
        raise InvalidEventField(f"event_time must be a datetime, got {event_time!r}")
    if not event_name.startswith("ObjectCreated:"):
        raise InvalidEventField(
            f"event_name {event_name!r} is not an ObjectCreated event (e.g. 'ObjectCreated:Put')"
        )


def parse_s3_event(body: str | bytes) -> list[ObjectCreated]:
    """The ObjectCreated records of an S3 event notification body.

    Accepts the S3 form (``{"Records": [...]}``), and the same wrapped in an SNS notification or
    in a Lambda SQS event. The ``s3:TestEvent`` S3 sends when rules are configured yields ``[]``.
    Anything else raises :class:`MalformedS3Event`; a record for another event kind raises
    :class:`UnsupportedS3Event`.
    """
    return _parse(body, _MAX_WRAPPING)


def _parse(body: str | bytes, wrapping_left: int) -> list[ObjectCreated]:
    if isinstance(body, bytes | bytearray):
        if len(body) > MAX_EVENT_BYTES:
            raise MalformedS3Event(f"event body is {len(body)} bytes; limit {MAX_EVENT_BYTES}")
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedS3Event(f"event body is not UTF-8: {exc}") from exc
    if not isinstance(body, str):
        raise MalformedS3Event(f"event body must be str or bytes, got {type(body).__name__}")
    if len(body) > MAX_EVENT_BYTES:
        raise MalformedS3Event(f"event body is {len(body)} characters; limit {MAX_EVENT_BYTES}")
    document = parse_json(
        body, lambda reason: MalformedS3Event(f"event body is not JSON: {reason}")
    )
    if not isinstance(document, dict):
        raise MalformedS3Event(f"event body must be a JSON object, got {type(document).__name__}")
    if document.get("Event") == "s3:TestEvent":
        return []
    if document.get("Type") == "Notification" and "Message" in document:
        return _parse(
            _unwrap(document.get("Message"), "SNS Message", wrapping_left), wrapping_left - 1
        )
    records = document.get("Records")
    if not isinstance(records, list) or not records:
        raise MalformedS3Event(
            "event body has no 'Records' list; expected an S3 event notification "
            f"(keys present: {_show(sorted(document)[:10])})"
        )
    events: list[ObjectCreated] = []
    for index, record in enumerate(records):
        if isinstance(record, dict) and record.get("eventSource") == "aws:sqs":
            inner = _unwrap(record.get("body"), f"Records[{index}].body", wrapping_left)
            events.extend(_parse(inner, wrapping_left - 1))
        else:
            events.append(_record(record, index))
    return events


def _unwrap(inner: object, where: str, wrapping_left: int) -> str:
    if wrapping_left <= 0:
        raise MalformedS3Event(f"{where}: too many envelopes (SNS/SQS) around the S3 event")
    if not isinstance(inner, str):
        raise MalformedS3Event(f"{where} must be a string holding the S3 event JSON")
    return inner


def _record(record: object, index: int) -> ObjectCreated:
    where = f"Records[{index}]"
    if not isinstance(record, dict):
        raise MalformedS3Event(f"{where} must be an object")
    if record.get("eventSource") != "aws:s3":
        raise MalformedS3Event(
            f"{where}.eventSource is {_show(record.get('eventSource'))}, not 'aws:s3'"
        )
    event_name = _field(record, "eventName", str, where)
    if not event_name.startswith("ObjectCreated:"):
        raise UnsupportedS3Event(
            f"{where}.eventName is {_show(event_name)}; only ObjectCreated events carry work"
        )
    s3 = _field(record, "s3", dict, where)
    bucket = _field(_field(s3, "bucket", dict, f"{where}.s3"), "name", str, f"{where}.s3.bucket")
    obj = _field(s3, "object", dict, f"{where}.s3")
    owhere = f"{where}.s3.object"
    raw_key = _field(obj, "key", str, owhere)
    try:
        key = decode_event_key(raw_key)
    except UnicodeDecodeError as exc:
        raise MalformedS3Event(f"{owhere}.key {_show(raw_key)} does not decode to UTF-8") from exc
    size = _field(obj, "size", int, owhere)
    if not bucket or not key or size < 0:
        raise MalformedS3Event(f"{where}: empty bucket or key, or negative size")
    event_time = record.get("eventTime", "")
    return ObjectCreated(
        bucket=bucket,
        key=key,
        size=size,
        etag=_field(obj, "eTag", str, owhere).strip('"'),
        version_id=_optional(obj, "versionId", owhere),
        sequencer=_optional(obj, "sequencer", owhere),
        event_name=event_name,
        event_time=event_time if isinstance(event_time, str) else "",
    )


def _field(container: Mapping[str, Any], name: str, kind: type[_T], where: str) -> _T:
    value = container.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedS3Event(
            f"{where}.{name} must be {kind.__name__}, got {type(value).__name__}"
            + (" (missing)" if name not in container else "")
        )
    return value


def _optional(container: Mapping[str, Any], name: str, where: str) -> str | None:
    if container.get(name) is None:
        return None
    return _field(container, name, str, where)


def _show(value: object) -> str:
    """``repr`` cut to 80 characters: messages name the bad value without copying a huge one."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class CreatedObject(Protocol):
    """What a bucket knows about an object it has just stored (``ObjectInfo`` fits)."""

    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def etag(self) -> str: ...
    @property
    def version_id(self) -> str | None: ...


class SequencerSource:
    """Increasing S3-style sequencers (18 upper-case hex digits), seeded from the clock."""

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._clock_ns = clock_ns
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            self._last = max(self._last + 1, self._clock_ns())
            return f"{self._last:018X}"


class NotifyingSink:
    """Turns "object created" calls from the directory bucket into S3 events on a queue.

    A send failure propagates (a ``QueueError``); the object is stored regardless, and the replay
    tool recovers a lost notification.
    """

    def __init__(
        self,
        queue: QueueSender,
        *,
        region: str = "us-east-1",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sequencers: SequencerSource | None = None,
    ) -> None:
        self._queue = queue
        self._region = region
        self._clock = clock
        self._sequencers = sequencers or SequencerSource()

    def on_object_created(
        self, bucket: str, info: CreatedObject, *, sequencer: str | None = None
    ) -> str | None:
        """Send the event if ``info.key`` matches a rule; return the message id, else ``None``."""
        if not notification_rule_matches(info.key):
            return None
        event = s3_event(
            bucket,
            info.key,
            info.size,
            info.etag,
            info.version_id,
            sequencer or self._sequencers.next(),
            self._clock(),
            region=self._region,
        )
        return self._queue.send(json.dumps(event, separators=(",", ":")))
