"""Projection-queue messages and evidence keys, parsed (pure: no I/O).

A message is an S3 event notification (``S3ObjectCreatedNotification`` in openapi.yaml): the raw
S3 event as an SQS body, the same wrapped in an SNS notification or a Lambda SQS event, the
``s3:TestEvent`` S3 sends when its rules are configured (an empty list: delete and ignore), or the
replay tool's synthetic message (:func:`synthetic_notification`, the same shape). Parsing is
:func:`baml_studio.objectstore.notifications.parse_s3_event`, the parser of the events the
directory bucket emits; keys come back URL-decoded (``+`` is a space, ``%XX`` a byte).

A key names its scope, stream, plane and sequence, flush or CID (gateway/keys.py)::

    evidence/v1/<tenant>/<project>/<environment>/
        streams/<euid>/meta/<seq>.bamlmeta.zst          meta
        streams/<euid>/data/<seq>.bamldata.zst          data
        streams/<euid>/values/<flush_ulid>.bamlpack.zst pack
        cas/values/<2 hex>/<cid hex>.bamlvalue.zst      value
        cas/tables/<2 hex>/<cid hex>.bamltable.zst      table
        quarantine/<one of the above>.quarantine        quarantine (the marker of that object)

Errors, in the ``ProjectorError`` tree of :mod:`baml_studio.projector.errors` (both terminal:
the worker dead-letters the message)::

    ProjectorError
    ├── MalformedMessage      a body that is not an S3 ObjectCreated notification
    └── MalformedKey          a key outside the evidence grammar (``key`` names it)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import InvalidKeyField
from baml_studio.gateway.keys import (
    CAS_SUFFIX,
    EVIDENCE_ROOT,
    SEGMENT_SUFFIX,
    check_euid,
    check_flush_ulid,
    check_sequence,
    cid_hex,
)
from baml_studio.objectstore.notifications import (
    InvalidEventField,
    MalformedS3Event,
    ObjectCreated,
    parse_s3_event,
    s3_event,
)
from baml_studio.projector.errors import ProjectorError

EvidenceKind = Literal["meta", "data", "pack", "value", "table", "quarantine"]
ObjectEvent = ObjectCreated
"""One ObjectCreated record: ``bucket``, decoded ``key``, ``size``, ``etag`` (no quotes),
``version_id``, ``sequencer``, ``event_name`` (and ``event_time``)."""

REPLAY_MARKER = "baml-replay"
"""Set to ``true`` in a synthetic record's ``userIdentity`` (S3 records allow extra fields)."""

PACK_SUFFIX = ".bamlpack.zst"
QUARANTINE_SUFFIX = ".quarantine"
NOTIFYING_KINDS: frozenset[str] = frozenset({"meta", "pack"})
_SEQUENCE_TEXT = re.compile(r"[0-9]{20}")
_MAX_KEY_CHARS = 1024


class MalformedMessage(ProjectorError):
    """The body is not an S3 ObjectCreated notification (or one of its envelopes)."""

    transient = False


class MalformedKey(ProjectorError):
    """The key is not an evidence key; ``key`` is the offending key."""

    transient = False

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{_show(key)} is not an evidence key: {reason}", key=key)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class EvidenceKey:
    """What an evidence key names. ``euid`` for stream objects, ``sequence`` for segments,
    ``flush_id`` for packs, ``cid`` (64 lowercase hex, no ``bamlv_1_``) for CAS objects. A
    quarantine marker carries the fields of the object it marks, and that object as ``subject``.
    """

    scope: Scope
    kind: EvidenceKind
    euid: str | None = None
    sequence: int | None = None
    flush_id: str | None = None
    cid: str | None = None
    subject: EvidenceKey | None = None


def parse_notification(body: str | bytes) -> list[ObjectEvent]:
    """The ObjectCreated records of one queue message; ``[]`` for ``s3:TestEvent``.

    Raises :class:`MalformedMessage` for anything else: not JSON, no ``Records``, a record that
    is not ``aws:s3`` or not ``ObjectCreated:*``, a missing or mistyped field, an undecodable key.
    """
    try:
        return parse_s3_event(body)
    except MalformedS3Event as exc:
        raise MalformedMessage(f"not an S3 ObjectCreated notification: {exc}") from exc


def parse_evidence_key(key: str) -> EvidenceKey:
    """The scope, kind and identity of an evidence key, exactly as gateway/keys.py builds it;
    :class:`MalformedKey` for any other text."""
    if not isinstance(key, str):
        raise MalformedKey(repr(key), f"a key is a string, not {type(key).__name__}")
    if len(key) > _MAX_KEY_CHARS:
        raise MalformedKey(key, f"longer than {_MAX_KEY_CHARS} characters")
    root = EVIDENCE_ROOT + "/"
    if not key.startswith(root):
        raise MalformedKey(key, f"evidence keys start with {root!r}")
    parts = key[len(root) :].split("/", 3)
    if len(parts) != 4:
        raise MalformedKey(key, "expected <tenant>/<project>/<environment>/<object path>")
    try:
        scope = Scope(parts[0], parts[1], parts[2])
    except ValueError as exc:
        raise MalformedKey(key, str(exc)) from None
    rest = parts[3]
    if rest.startswith("quarantine/"):
        inner = rest[len("quarantine/") :]
        if not inner.endswith(QUARANTINE_SUFFIX):
            raise MalformedKey(key, f"a quarantine marker ends with {QUARANTINE_SUFFIX!r}")
        subject = _object(key, scope, inner[: -len(QUARANTINE_SUFFIX)])
        return EvidenceKey(
            scope,
            "quarantine",
            subject.euid,
            subject.sequence,
            subject.flush_id,
            subject.cid,
            subject,
        )
    return _object(key, scope, rest)


def _object(key: str, scope: Scope, path: str) -> EvidenceKey:
    parts = path.split("/")
    if len(parts) != 4:
        raise MalformedKey(
            key,
            "expected streams/<euid>/{meta,data,values}/<file> "
            "or cas/{values,tables}/<2 hex>/<file>",
        )
    top, second, third, name = parts
    try:
        if top == "streams":
            return _stream_object(key, scope, check_euid(second), third, name)
        if top == "cas":
            return _cas_object(key, scope, second, third, name)
    except InvalidKeyField as exc:
        raise MalformedKey(key, str(exc)) from None
    raise MalformedKey(key, f"{top!r} is neither 'streams' nor 'cas'")


def _stream_object(key: str, scope: Scope, euid: str, plane: str, name: str) -> EvidenceKey:
    if plane in ("meta", "data"):
        suffix = SEGMENT_SUFFIX[plane]
        digits = _strip(key, name, suffix)
        if not _SEQUENCE_TEXT.fullmatch(digits):
            raise MalformedKey(key, f"sequence {digits!r} must be 20 decimal digits")
        sequence = check_sequence(int(digits))
        return EvidenceKey(scope, "meta" if plane == "meta" else "data", euid, sequence)
    if plane == "values":
        flush_id = check_flush_ulid(_strip(key, name, PACK_SUFFIX))
        return EvidenceKey(scope, "pack", euid, flush_id=flush_id)
    raise MalformedKey(key, f"stream plane {plane!r} is not 'meta', 'data' or 'values'")


def _cas_object(key: str, scope: Scope, family: str, shard: str, name: str) -> EvidenceKey:
    if family not in CAS_SUFFIX:
        raise MalformedKey(key, f"CAS family {family!r} is not 'values' or 'tables'")
    digits = _strip(key, name, CAS_SUFFIX[family])
    if cid_hex(digits) != digits:
        raise MalformedKey(key, "a CAS file name is the 64 hex digits without 'bamlv_1_'")
    if shard != digits[:2]:
        raise MalformedKey(key, f"CAS directory {shard!r} must be the CID's first two digits")
    return EvidenceKey(scope, "value" if family == "values" else "table", cid=digits)


def _strip(key: str, name: str, suffix: str) -> str:
    if not name.endswith(suffix):
        raise MalformedKey(key, f"file name {_show(name)} must end with {suffix!r}")
    return name[: -len(suffix)]


def synthetic_notification(
    bucket: str,
    key: str,
    size: int,
    etag: str,
    version_id: str | None = None,
    *,
    event_time: datetime | None = None,
    region: str = "us-east-1",
) -> str:
    """The replay tool's message for one meta segment or value pack already in the bucket: the
    S3 event S3 would have sent (``ObjectCreated:Put``, ``aws:s3``, the key URL-encoded, no
    ``sequencer``), marked ``"baml-replay": true`` in the record's ``userIdentity``.

    :class:`MalformedKey` if ``key`` is not a meta or pack key (nothing else notifies);
    :class:`MalformedMessage` for a value no S3 event could carry (negative size, empty bucket).
    """
    if parse_evidence_key(key).kind not in NOTIFYING_KINDS:
        raise MalformedKey(key, "only meta segments and value packs notify the projection queue")
    try:
        event = s3_event(
            bucket,
            key,
            size,
            etag,
            version_id,
            None,
            event_time or datetime.now(UTC),
            region=region,
            principal_id=REPLAY_MARKER,
        )
    except InvalidEventField as exc:
        raise MalformedMessage(f"cannot build a synthetic notification: {exc}") from exc
    event["Records"][0]["userIdentity"][REPLAY_MARKER] = True
    return json.dumps(event, separators=(",", ":"))


def _show(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


__all__ = [
    "EvidenceKey",
    "EvidenceKind",
    "MalformedKey",
    "MalformedMessage",
    "ObjectEvent",
    "parse_evidence_key",
    "parse_notification",
    "synthetic_notification",
]
