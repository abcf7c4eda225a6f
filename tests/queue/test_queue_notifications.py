"""S3 event JSON: the notification rule, construction, parsing, fuzzing and the sink."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.objectstore.notifications import (
    NOTIFICATION_RULES,
    InvalidEventField,
    MalformedS3Event,
    NotifyingSink,
    ObjectCreated,
    SequencerSource,
    UnsupportedS3Event,
    decode_event_key,
    encode_event_key,
    notification_rule_matches,
    parse_s3_event,
    s3_event,
)
from baml_studio.queue.sqlite import SqliteQueue

SCOPE = "evidence/v1/acme/checkout/prod/"
META = SCOPE + "streams/0123456789abcdef0123456789abcdef/meta/00000000000000000001.bamlmeta.zst"
PACK = (
    SCOPE
    + "streams/0123456789abcdef0123456789abcdef/values/01J00000000000000000000000.bamlpack.zst"
)
WHEN = datetime(2026, 9, 10, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "notifies"),
    [
        (META, True),
        (PACK, True),
        ("evidence/v1/x.bamlmeta.zst", True),
        (SCOPE + "streams/e/data/00000000000000000001.bamldata.zst", False),
        (SCOPE + "cas/values/ab/" + "ab" * 32 + ".bamlvalue.zst", False),
        (SCOPE + "cas/tables/ab/" + "ab" * 32 + ".bamltable.zst", False),
        (SCOPE + "quarantine/x.bamlmeta.zst.quarantine", False),
        ("derived/v1/acme/x.bamlmeta.zst", False),
        ("temporary/v1/x.bamlpack.zst", False),
        ("evidence/v2/x.bamlmeta.zst", False),
        ("Evidence/v1/x.bamlmeta.zst", False),
        ("xevidence/v1/x.bamlmeta.zst", False),
        ("evidence/v1/x.bamlmeta.zst.tmp", False),
        ("evidence/v1/x.BAMLMETA.ZST", False),
        ("evidence/v1/x.bamlmeta", False),
        ("evidence/v1/x.bamlpack", False),
        ("", False),
    ],
)
def test_only_meta_segments_and_packs_under_evidence_notify(key: str, notifies: bool) -> None:
    assert notification_rule_matches(key) is notifies


def test_exactly_two_rules() -> None:
    assert [(r.prefix, r.suffix) for r in NOTIFICATION_RULES] == [
        ("evidence/v1/", ".bamlmeta.zst"),
        ("evidence/v1/", ".bamlpack.zst"),
    ]


def test_s3_event_golden() -> None:
    event = s3_event(
        "customer-bucket",
        "evidence/v1/a b+c/x.bamlmeta.zst",
        1234,
        "0123456789abcdef0123456789abcdef",
        "v-1",
        "0000066184B607EBBD",
        WHEN,
        request_id="C3D13FE58DE4C810",
    )
    assert event == {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": "us-east-1",
                "eventTime": "2026-09-10T12:00:00.123Z",
                "eventName": "ObjectCreated:Put",
                "userIdentity": {"principalId": "baml-studio"},
                "requestParameters": {"sourceIPAddress": "127.0.0.1"},
                "responseElements": {
                    "x-amz-request-id": "C3D13FE58DE4C810",
                    "x-amz-id-2": "C3D13FE58DE4C810",
                },
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "configurationId": "baml-evidence-meta",
                    "bucket": {
                        "name": "customer-bucket",
                        "ownerIdentity": {"principalId": "baml-studio"},
                        "arn": "arn:aws:s3:::customer-bucket",
                    },
                    "object": {
                        "key": "evidence/v1/a+b%2Bc/x.bamlmeta.zst",
                        "size": 1234,
                        "eTag": "0123456789abcdef0123456789abcdef",
                        "versionId": "v-1",
                        "sequencer": "0000066184B607EBBD",
                    },
                },
            }
        ]
    }


@pytest.mark.parametrize(
    ("key", "encoded"),
    [
        ("red flower.jpg", "red+flower.jpg"),
        ("a+b", "a%2Bb"),
        ("dir/sub dir/f", "dir/sub+dir/f"),
        ("é", "%C3%A9"),
        ("a=b&c:d", "a%3Db%26c%3Ad"),
        ("50%", "50%25"),
    ],
)
def test_keys_are_encoded_as_s3_encodes_them(key: str, encoded: str) -> None:
    assert encode_event_key(key) == encoded
    assert decode_event_key(encoded) == key


def test_unversioned_and_unsequenced_fields_are_omitted() -> None:
    event = s3_event("bucket", META, 1, "e", None, None, WHEN)
    obj = event["Records"][0]["s3"]["object"]
    assert set(obj) == {"key", "size", "eTag"}
    [parsed] = parse_s3_event(json.dumps(event))
    assert (parsed.version_id, parsed.sequencer) == (None, None)


def test_event_time_is_utc_milliseconds() -> None:
    east = timezone(timedelta(hours=2))
    event = s3_event("b", META, 1, "e", None, None, datetime(2026, 1, 1, 2, 0, tzinfo=east))
    assert event["Records"][0]["eventTime"] == "2026-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("", META, 1, "e", None, None, WHEN), {}),
        (("b", "", 1, "e", None, None, WHEN), {}),
        (("b", "bad \ud800", 1, "e", None, None, WHEN), {}),
        (("b", META, -1, "e", None, None, WHEN), {}),
        (("b", META, True, "e", None, None, WHEN), {}),
        (("b", META, 1, "e", None, None, datetime(2026, 1, 1)), {}),
        (("b", META, 1, "e", None, None, WHEN), {"event_name": "ObjectRemoved:Delete"}),
    ],
)
def test_s3_event_rejects_what_s3_could_not_send(args: tuple[Any, ...], kwargs: Any) -> None:
    with pytest.raises(InvalidEventField):
        s3_event(*args, **kwargs)


keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(
    key=keys,
    size=st.integers(min_value=0, max_value=2**63),
    version=st.none() | st.text(min_size=1, max_size=40),
    sequencer=st.none() | st.from_regex(r"[0-9A-F]{16,20}", fullmatch=True),
)
def test_event_round_trips(key: str, size: int, version: str | None, sequencer: str | None) -> None:
    body = json.dumps(s3_event("bucket-x", key, size, '"etag"', version, sequencer, WHEN))
    assert parse_s3_event(body) == [
        ObjectCreated(
            bucket="bucket-x",
            key=key,
            size=size,
            etag="etag",
            version_id=version,
            sequencer=sequencer,
            event_name="ObjectCreated:Put",
            event_time="2026-09-10T12:00:00.123Z",
        )
    ]
    assert parse_s3_event(body.encode()) == parse_s3_event(body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


def _accepts_or_raises_typed(body: str | bytes) -> None:
    try:
        result = parse_s3_event(body)
    except MalformedS3Event:
        return
    assert all(isinstance(event, ObjectCreated) for event in result)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300))
def test_fuzz_arbitrary_bodies(body: str | bytes) -> None:
    _accepts_or_raises_typed(body)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fuzz_arbitrary_json(value: Any) -> None:
    _accepts_or_raises_typed(json.dumps(value))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


VALID = s3_event("bucket", META, 10, "etag", "v", "00AB", WHEN)
VALID_PATHS = _paths(VALID)


@settings(max_examples=400, deadline=None)
@given(path=st.sampled_from(VALID_PATHS), replacement=json_values, delete=st.booleans())
def test_fuzz_mutated_valid_events(path: tuple[Any, ...], replacement: Any, delete: bool) -> None:
    event = json.loads(json.dumps(VALID))
    parent = event
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    _accepts_or_raises_typed(json.dumps(event))


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not json",
        "[]",
        '"Records"',
        "{}",
        '{"Records": []}',
        '{"Records": {}}',
        '{"Records": [1]}',
        '{"Records": [{"eventSource": "aws:sns"}]}',
        "[" * 100_000 + "]" * 100_000,
        b"\xff\xfe",
        "x" * 1_048_577,
    ],
)
def test_malformed_bodies_raise_typed_errors(body: str | bytes) -> None:
    with pytest.raises(MalformedS3Event) as caught:
        parse_s3_event(body)
    assert not caught.value.transient


def _mutated(**changes: Any) -> str:
    event = json.loads(json.dumps(VALID))
    record = event["Records"][0]
    for dotted, value in changes.items():
        target = record
        *parents, last = dotted.split("__")
        for part in parents:
            target = target[part]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return json.dumps(event)


@pytest.mark.parametrize(
    "body",
    [
        _mutated(s3__object__key=KeyError),
        _mutated(s3__object__key=""),
        _mutated(s3__object__key="%FF%FE"),
        _mutated(s3__object__size="10"),
        _mutated(s3__object__size=True),
        _mutated(s3__object__size=-1),
        _mutated(s3__object__size=1.5),
        _mutated(s3__object__eTag=KeyError),
        _mutated(s3__object__versionId=7),
        _mutated(s3__bucket__name=KeyError),
        _mutated(s3__bucket=None),
        _mutated(eventName=None),
        _mutated(eventSource="aws:sqs"),
    ],
)
def test_records_missing_or_mistyped_fields_are_malformed(body: str) -> None:
    with pytest.raises(MalformedS3Event):
        parse_s3_event(body)


def test_other_event_kinds_are_unsupported() -> None:
    with pytest.raises(UnsupportedS3Event, match="ObjectRemoved:Delete"):
        parse_s3_event(_mutated(eventName="ObjectRemoved:Delete"))


def test_the_s3_test_event_yields_nothing() -> None:
    test_event = {
        "Service": "Amazon S3",
        "Event": "s3:TestEvent",
        "Time": "2026-09-10T12:00:00.000Z",
        "Bucket": "bucket",
        "RequestId": "R",
        "HostId": "H",
    }
    assert parse_s3_event(json.dumps(test_event)) == []


def test_sqs_and_sns_envelopes_are_unwrapped() -> None:
    inner = json.dumps(VALID)
    expected = parse_s3_event(inner)
    lambda_sqs = {"Records": [{"messageId": "m", "eventSource": "aws:sqs", "body": inner}]}
    sns = {"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": inner}
    assert parse_s3_event(json.dumps(lambda_sqs)) == expected
    assert parse_s3_event(json.dumps(sns)) == expected
    sns_in_sqs = {"Records": [{"eventSource": "aws:sqs", "body": json.dumps(sns)}]}
    assert parse_s3_event(json.dumps(sns_in_sqs)) == expected
    too_deep = {"Type": "Notification", "Message": json.dumps(sns_in_sqs)}
    with pytest.raises(MalformedS3Event, match="envelopes"):
        parse_s3_event(json.dumps(too_deep))
    with pytest.raises(MalformedS3Event):
        parse_s3_event(json.dumps({"Records": [{"eventSource": "aws:sqs", "body": 5}]}))


@dataclass(frozen=True)
class _Info:
    key: str
    size: int
    etag: str
    version_id: str | None


def test_notifying_sink_sends_only_for_rule_keys(tmp_path: Path) -> None:
    with SqliteQueue(tmp_path / "q.sqlite3") as queue:
        sink = NotifyingSink(queue, clock=lambda: WHEN)
        assert sink.on_object_created("bkt", _Info(SCOPE + "x.bamldata.zst", 1, "e", None)) is None
        assert queue.approximate_count() == 0
        meta_id = sink.on_object_created("bkt", _Info(META, 11, "e1", "v1"))
        pack_id = sink.on_object_created("bkt", _Info(PACK, 22, "e2", None), sequencer="00FF")
        messages = {m.id: m for m in queue.receive()}
    assert set(messages) == {meta_id, pack_id}
    [meta] = parse_s3_event(messages[meta_id].body)
    [pack] = parse_s3_event(messages[pack_id].body)
    assert (meta.bucket, meta.key, meta.size, meta.etag, meta.version_id) == (
        "bkt", META, 11, "e1", "v1",
    )  # fmt: skip
    assert (pack.key, pack.size, pack.version_id, pack.sequencer) == (PACK, 22, None, "00FF")
    assert meta.sequencer is not None and len(meta.sequencer) == 18
    configuration_ids = {
        json.loads(m.body)["Records"][0]["s3"]["configurationId"] for m in messages.values()
    }
    assert configuration_ids == {"baml-evidence-meta", "baml-evidence-pack"}


def test_sequencers_increase_even_when_the_clock_stalls() -> None:
    source = SequencerSource(clock_ns=lambda: 1_000)
    values = [source.next() for _ in range(5)]
    assert values == sorted(values) and len(set(values)) == 5
    assert all(len(v) == 18 for v in values)
