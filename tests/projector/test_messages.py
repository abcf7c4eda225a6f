"""Queue messages and evidence keys: the spec's examples, the directory bucket's events, the
envelopes, golden bad inputs, hypothesis round-trips and fuzzing (only our typed errors)."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import MAX_SEQUENCE, cas_key, pack_key, segment_key
from baml_studio.objectstore.notifications import NotifyingSink, s3_event
from baml_studio.objectstore.port import ObjectInfo
from baml_studio.projector.messages import (
    REPLAY_MARKER,
    EvidenceKey,
    MalformedKey,
    MalformedMessage,
    parse_evidence_key,
    parse_notification,
    synthetic_notification,
)

_BESIDE = Path(__file__).resolve().parents[3] / "shared" / "spec"  # <repo>/../shared/spec
SPEC = Path(os.environ.get("BAML_SPEC_DIR", str(_BESIDE))) / "openapi.yaml"

SCOPE = Scope("tn_acme", "prj_billing", "env_prod")
EUID = "3f9c2b7e1a4d4c8e9b0f1e2d3c4b5a69"
ULID = "01J8ZK3V5N4Q2W8X7Y6T5R4E3D"
CID = "ab" + "0123456789abcdef" * 3 + "0123456789abcd"
PREFIX = "evidence/v1/tn_acme/prj_billing/env_prod/"
META = PREFIX + f"streams/{EUID}/meta/00000000000000000041.bamlmeta.zst"
PACK = PREFIX + f"streams/{EUID}/values/{ULID}.bamlpack.zst"


def spec_schemas() -> dict[str, Any]:
    return dict(yaml.safe_load(SPEC.read_text(encoding="utf-8"))["components"]["schemas"])


def conforms(data: Any, schema: dict[str, Any], schemas: dict[str, Any], at: str = "$") -> None:
    """Enough of JSON Schema for the notification: $ref, type, required, properties,
    additionalProperties, const, minItems, minimum."""
    if "$ref" in schema:
        conforms(data, schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas, at)
        return
    kind = schema.get("type")
    if "const" in schema:
        assert data == schema["const"], f"{at}: {data!r} != {schema['const']!r}"
    if kind == "object":
        assert isinstance(data, dict), at
        missing = set(schema.get("required", [])) - set(data)
        assert not missing, f"{at}: missing {sorted(missing)}"
        properties = schema.get("properties", {})
        for key, value in data.items():
            if key in properties:
                conforms(value, properties[key], schemas, f"{at}.{key}")
            else:
                assert schema.get("additionalProperties", True) is not False, f"{at}.{key}"
    elif kind == "array":
        assert isinstance(data, list) and len(data) >= schema.get("minItems", 0), at
        for index, item in enumerate(data):
            conforms(item, schema["items"], schemas, f"{at}[{index}]")
    elif kind == "string":
        assert isinstance(data, str), at
    elif kind == "integer":
        assert isinstance(data, int) and not isinstance(data, bool), at
        assert data >= schema.get("minimum", data), at


# -- notifications ----------------------------------------------------------------------------


def test_the_spec_examples_parse() -> None:
    schemas = spec_schemas()
    schema = schemas["S3ObjectCreatedNotification"]
    examples = schema["examples"]
    assert len(examples) == 2
    events = [parse_notification(json.dumps(example)) for example in examples]
    assert [len(e) for e in events] == [1, 1]
    meta, pack = events[0][0], events[1][0]
    assert (meta.bucket, meta.key, meta.size) == ("acme-baml-evidence", META, 1234)
    assert meta.etag == "9b2cf535f27731c974343645a3985328"
    assert meta.version_id == "3sL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo"
    assert (meta.sequencer, meta.event_name) == ("0055AED6DCD90281E5", "ObjectCreated:Put")
    assert (pack.key, pack.size) == (PACK, 410000)
    assert parse_evidence_key(meta.key) == EvidenceKey(SCOPE, "meta", EUID, 41)
    assert parse_evidence_key(pack.key) == EvidenceKey(SCOPE, "pack", EUID, flush_id=ULID)
    for example in examples:
        conforms(example, schema, schemas)


def test_keys_are_url_decoded_as_s3_encodes_them() -> None:
    event = s3_event("b", "evidence/v1/a b/c+d/é%", 1, "e", None, None, datetime.now(UTC))
    assert event["Records"][0]["s3"]["object"]["key"] == "evidence/v1/a+b/c%2Bd/%C3%A9%25"
    (parsed,) = parse_notification(json.dumps(event))
    assert parsed.key == "evidence/v1/a b/c+d/é%"


def test_events_from_the_directory_bucket_parse() -> None:
    sent: list[str] = []

    class Capture:
        def send(self, body: str, *, delay_s: int = 0) -> str:
            sent.append(body)
            return str(len(sent))

    sink = NotifyingSink(Capture())
    for key, size in ((META, 10), (PACK, 20)):
        info = ObjectInfo(key=key, size=size, sha256=None, version_id="v1", etag="abc")
        assert sink.on_object_created("bucket", info) is not None
    data = ObjectInfo(
        key=PREFIX + f"streams/{EUID}/data/00000000000000000001.bamldata.zst",
        size=1,
        sha256=None,
        version_id=None,
        etag="x",
    )
    assert sink.on_object_created("bucket", data) is None  # data segments do not notify
    events = [parse_notification(body)[0] for body in sent]
    assert [(e.key, e.size, e.version_id, e.etag) for e in events] == [
        (META, 10, "v1", "abc"),
        (PACK, 20, "v1", "abc"),
    ]
    assert int(events[0].sequencer or "", 16) < int(events[1].sequencer or "", 16)


def test_envelopes_and_the_test_event() -> None:
    body = synthetic_notification("bucket", META, 5, "etag")
    lambda_event = {"Records": [{"eventSource": "aws:sqs", "messageId": "1", "body": body}]}
    sns = {"Type": "Notification", "MessageId": "m", "Message": body}
    for wrapped in (body, json.dumps(lambda_event), json.dumps(sns), body.encode("utf-8")):
        (event,) = parse_notification(wrapped)
        assert (event.key, event.size) == (META, 5)
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "bucket"}
    assert parse_notification(json.dumps(test_event)) == []


MALFORMED = [
    "",
    "not json",
    "[]",
    "{}",
    '{"Records": []}',
    '{"Records": [1]}',
    json.dumps({"Records": [{"eventSource": "aws:sqs", "body": 5}]}),
    json.dumps({"Type": "Notification", "Message": {"Records": []}}),
]


def _record(**object_fields: Any) -> str:
    event = json.loads(synthetic_notification("bucket", META, 5, "etag"))
    obj = event["Records"][0]["s3"]["object"]
    obj.update(object_fields)
    for name, value in list(obj.items()):
        if value is None:
            del obj[name]
    return json.dumps(event)


@pytest.mark.parametrize(
    "body",
    [
        *MALFORMED,
        _record(size=-1),
        _record(size="5"),
        _record(key=None),
        _record(key="%FF%FE"),
        _record(eTag=None),
        _record(versionId=7),
        json.dumps(
            {"Records": [{**json.loads(_record())["Records"][0], "eventName": "ObjectRemoved:*"}]}
        ),
        json.dumps({"Records": [{**json.loads(_record())["Records"][0], "eventSource": "x"}]}),
        "x" * 2_000_000,
        "[" * 100_000,
    ],
)
def test_malformed_messages_are_typed(body: str) -> None:
    with pytest.raises(MalformedMessage) as caught:
        parse_notification(body)
    assert not caught.value.transient


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
FIELDS = ["eventSource", "eventName", "s3", "eventTime", "bucket", "object", "key", "size", "eTag"]


def _outcome(body: str | bytes) -> None:
    try:
        events = parse_notification(body)
    except MalformedMessage:
        return
    for event in events:
        assert isinstance(event.key, str) and event.size >= 0


@given(st.text(max_size=300) | st.binary(max_size=300))
def test_fuzz_text(body: str | bytes) -> None:
    _outcome(body)


@given(JSON)
def test_fuzz_json(document: Any) -> None:
    _outcome(json.dumps(document))
    _outcome(json.dumps({"Records": [document]}))


@given(st.sampled_from(FIELDS), JSON)
def test_fuzz_a_valid_event_with_one_field_replaced(field: str, value: Any) -> None:
    event = json.loads(synthetic_notification("bucket", META, 5, "etag"))
    record = event["Records"][0]
    for container in (record, record["s3"], record["s3"]["object"], record["s3"]["bucket"]):
        if field in container:
            container[field] = value
    _outcome(json.dumps(event))


# -- synthetic notifications ------------------------------------------------------------------


def test_synthetic_notification_has_the_s3_shape() -> None:
    when = datetime(2026, 9, 10, 10, 15, 8, 412000, tzinfo=UTC)
    body = synthetic_notification("acme-baml-evidence", META, 1234, '"etag"', "v9", event_time=when)
    document = json.loads(body)
    schemas = spec_schemas()
    conforms(document, schemas["S3ObjectCreatedNotification"], schemas)
    record = document["Records"][0]
    assert record["eventSource"] == "aws:s3" and record["eventName"] == "ObjectCreated:Put"
    assert record["eventTime"] == "2026-09-10T10:15:08.412Z"
    assert record["userIdentity"][REPLAY_MARKER] is True
    assert record["s3"]["object"] == {"key": META, "size": 1234, "eTag": "etag", "versionId": "v9"}
    (event,) = parse_notification(body)
    assert (event.etag, event.version_id, event.sequencer) == ("etag", "v9", None)


def test_synthetic_notification_only_for_notifying_keys() -> None:
    data = PREFIX + f"streams/{EUID}/data/00000000000000000001.bamldata.zst"
    for key in (data, PREFIX + f"cas/values/ab/{CID}.bamlvalue.zst", "elsewhere/x.bamlmeta.zst"):
        with pytest.raises(MalformedKey):
            synthetic_notification("bucket", key, 1, "e")
    for bucket, size in (("", 1), ("bucket", -1)):
        with pytest.raises(MalformedMessage):
            synthetic_notification(bucket, META, size, "e")


# -- evidence keys ----------------------------------------------------------------------------

SCOPE_PARTS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
SCOPES = st.builds(Scope, SCOPE_PARTS, SCOPE_PARTS, SCOPE_PARTS)
EUIDS = st.from_regex(r"[0-9a-f]{32}", fullmatch=True)
SEQUENCES = st.integers(1, MAX_SEQUENCE)
ULIDS = st.from_regex(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", fullmatch=True)
CIDS = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


@st.composite
def keys(draw: st.DrawFn) -> tuple[str, EvidenceKey]:
    scope = draw(SCOPES)
    choice = draw(st.sampled_from(["meta", "data", "pack", "value", "table"]))
    if choice in ("meta", "data"):
        euid, seq = draw(EUIDS), draw(SEQUENCES)
        plane = "meta" if choice == "meta" else "data"
        return segment_key(scope, euid, plane, seq), EvidenceKey(scope, plane, euid, seq)
    if choice == "pack":
        euid, ulid = draw(EUIDS), draw(ULIDS)
        return pack_key(scope, euid, ulid), EvidenceKey(scope, "pack", euid, flush_id=ulid)
    cid = draw(CIDS)
    if choice == "value":
        return cas_key(scope, "values", cid), EvidenceKey(scope, "value", cid=cid)
    return cas_key(scope, "tables", "bamlv_1_" + cid), EvidenceKey(scope, "table", cid=cid)


@given(keys())
def test_every_gateway_key_parses_back(case: tuple[str, EvidenceKey]) -> None:
    key, expected = case
    assert parse_evidence_key(key) == expected


@given(keys())
def test_quarantine_markers_name_their_object(case: tuple[str, EvidenceKey]) -> None:
    key, subject = case
    prefix = f"evidence/v1/{subject.scope.tenant}/{subject.scope.project}/"
    prefix += f"{subject.scope.environment}/"
    marker = prefix + "quarantine/" + key[len(prefix) :] + ".quarantine"
    parsed = parse_evidence_key(marker)
    assert parsed.kind == "quarantine" and parsed.subject == subject
    assert (parsed.scope, parsed.euid, parsed.sequence, parsed.flush_id, parsed.cid) == (
        subject.scope,
        subject.euid,
        subject.sequence,
        subject.flush_id,
        subject.cid,
    )


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(keys(), st.text(min_size=1, max_size=20))
def test_synthetic_round_trip(case: tuple[str, EvidenceKey], etag: str) -> None:
    key, expected = case
    if expected.kind not in ("meta", "pack"):
        with pytest.raises(MalformedKey):
            synthetic_notification("bucket-1", key, 7, etag)
        return
    (event,) = parse_notification(synthetic_notification("bucket-1", key, 7, etag, "ver"))
    assert (event.bucket, event.key, event.size) == ("bucket-1", key, 7)
    assert (event.etag, event.version_id) == (etag.strip('"'), "ver")
    assert parse_evidence_key(event.key) == expected


BAD_KEYS = [
    "",
    "evidence/v1/",
    "evidence/v2/tn/prj/env/" + META[len(PREFIX) :],
    PREFIX,
    PREFIX + "streams",
    PREFIX + f"streams/{EUID}/meta/0000000000000000041.bamlmeta.zst",  # 19 digits
    PREFIX + f"streams/{EUID}/meta/00000000000000000000.bamlmeta.zst",  # sequence 0
    PREFIX + f"streams/{EUID}/meta/{2**64:020d}.bamlmeta.zst",  # over 2**64-1
    PREFIX + f"streams/{EUID}/meta/{'١' * 20}.bamlmeta.zst",  # non-ASCII digits
    PREFIX + f"streams/{EUID}/meta/+0000000000000000041.bamlmeta.zst",
    PREFIX + f"streams/{EUID}/meta/00000000000000000041.bamldata.zst",
    PREFIX + f"streams/{EUID}/data/00000000000000000041.bamlmeta.zst",
    PREFIX + f"streams/{EUID}/logs/00000000000000000041.bamlmeta.zst",
    PREFIX + f"streams/{EUID.upper()}/meta/00000000000000000041.bamlmeta.zst",
    PREFIX + f"streams/{EUID[:-1]}/meta/00000000000000000041.bamlmeta.zst",
    PREFIX + f"streams/{EUID}/meta/00000000000000000041.bamlmeta.zst/x",
    PREFIX + f"streams/{EUID}/values/81J8ZK3V5N4Q2W8X7Y6T5R4E3D.bamlpack.zst",  # first > 7
    PREFIX + f"streams/{EUID}/values/01J8ZK3V5N4Q2W8X7Y6T5R4E3I.bamlpack.zst",  # I
    PREFIX + f"streams/{EUID}/values/{ULID.lower()}.bamlpack.zst",
    PREFIX + f"streams/{EUID}/values/{ULID}.bamlmeta.zst",
    PREFIX + f"cas/values/ab/{CID}.bamltable.zst",
    PREFIX + f"cas/values/cd/{CID}.bamlvalue.zst",  # shard is not the CID's first two
    PREFIX + f"cas/values/ab/bamlv_1_{CID}.bamlvalue.zst",
    PREFIX + f"cas/values/AB/{CID.upper()}.bamlvalue.zst",
    PREFIX + f"cas/values/{CID}.bamlvalue.zst",
    PREFIX + f"cas/blobs/ab/{CID}.bamlvalue.zst",
    PREFIX + "quarantine/" + META[len(PREFIX) :],  # no .quarantine
    PREFIX + "quarantine/quarantine/" + META[len(PREFIX) :] + ".quarantine.quarantine",
    PREFIX + "quarantine/" + META + ".quarantine",  # the full key, not the path under the scope
    "evidence/v1/tn_acme/prj_billing/env_prod//quarantine/" + META[len(PREFIX) :] + ".quarantine",
    "evidence/v1/-tn/prj/env/" + META[len(PREFIX) :],
    "evidence/v1/tn acme/prj/env/" + META[len(PREFIX) :],
    "evidence/v1/" + "t" * 129 + "/prj/env/" + META[len(PREFIX) :],
    "derived/v1/tn_acme/prj_billing/env_prod/values_v1",
    "x" * 5000,
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_typed(key: str) -> None:
    with pytest.raises(MalformedKey) as caught:
        parse_evidence_key(key)
    assert caught.value.key == key and not caught.value.transient


def test_a_key_that_is_not_a_string_is_typed() -> None:
    with pytest.raises(MalformedKey):
        parse_evidence_key(41)  # type: ignore[arg-type]


@given(st.text(max_size=200))
def test_fuzz_keys(text: str) -> None:
    with contextlib.suppress(MalformedKey):
        parse_evidence_key(text)


@given(keys(), st.integers(0, 400), st.text(max_size=3), st.integers(0, 3))
def test_fuzz_mutated_keys(case: tuple[str, EvidenceKey], at: int, insert: str, cut: int) -> None:
    key = case[0]
    at %= len(key) + 1
    mutated = key[:at] + insert + key[at + cut :]
    try:
        parsed = parse_evidence_key(mutated)
    except MalformedKey:
        return
    assert isinstance(parsed, EvidenceKey) and parsed.scope.tenant


def test_space_in_an_encoded_key_decodes_then_fails_the_grammar() -> None:
    encoded = quote_plus("evidence/v1/tn acme/prj/env/x", safe="/")
    event = json.loads(synthetic_notification("bucket", META, 5, "e"))
    event["Records"][0]["s3"]["object"]["key"] = encoded
    (parsed,) = parse_notification(json.dumps(event))
    assert parsed.key == "evidence/v1/tn acme/prj/env/x"
    with pytest.raises(MalformedKey):
        parse_evidence_key(parsed.key)
