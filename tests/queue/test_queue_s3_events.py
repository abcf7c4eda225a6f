"""S3 → SQS end to end on ministack, and the directory bucket's event against S3's."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from baml_studio.objectstore.notifications import (
    NotificationSetupError,
    ObjectCreated,
    encode_event_key,
    parse_s3_event,
    s3_event,
)
from baml_studio.objectstore.s3_notifications import (
    allow_bucket_to_send,
    bucket_send_policy,
    configure,
    notification_rules,
)
from baml_studio.queue.port import Message
from baml_studio.queue.sqs import SqsQueue, ensure_queues

SCOPE = "evidence/v1/acme/checkout/prod/streams/0123456789abcdef0123456789abcdef/"


def _setup(s3: Any, sqs: Any) -> tuple[str, SqsQueue, str]:
    suffix = uuid.uuid4().hex[:10]
    bucket = f"evidence-{suffix}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    url, dlq_url, arn = ensure_queues(sqs, f"projection-{suffix}")
    allow_bucket_to_send(sqs, url, arn, bucket)
    configure(s3, bucket, arn)
    return bucket, SqsQueue(sqs, url, dead_letter_url=dlq_url), arn


def _drain(queue: SqsQueue, want: int) -> tuple[list[Message], list[ObjectCreated]]:
    """Receive until ``want`` ObjectCreated events arrived (one bounded wait), then once more."""
    messages: list[Message] = []
    events: list[ObjectCreated] = []
    while len(events) < want:
        batch = queue.receive(wait_s=5)
        if not batch:
            break
        for message in batch:
            messages.append(message)
            events.extend(parse_s3_event(message.body))
    extra = queue.receive(wait_s=1)
    messages.extend(extra)
    events.extend(e for m in extra for e in parse_s3_event(m.body))
    return messages, events


def test_configure_sets_exactly_the_two_rules(s3_client: Any, sqs_client: Any) -> None:
    bucket, _, arn = _setup(s3_client, sqs_client)
    stored = s3_client.get_bucket_notification_configuration(Bucket=bucket)
    assert stored["QueueConfigurations"] == notification_rules(arn)
    assert [r["Id"] for r in stored["QueueConfigurations"]] == [
        "baml-evidence-meta",
        "baml-evidence-pack",
    ]


def test_configure_again_keeps_other_rules_and_replaces_ours(
    s3_client: Any, sqs_client: Any
) -> None:
    bucket, _, arn = _setup(s3_client, sqs_client)
    other = {
        "Id": "someone-else",
        "QueueArn": arn,
        "Events": ["s3:ObjectRemoved:*"],
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "other/"}]}},
    }
    current = s3_client.get_bucket_notification_configuration(Bucket=bucket)
    s3_client.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [other, *current["QueueConfigurations"]]},
    )
    configure(s3_client, bucket, arn)
    configure(s3_client, bucket, arn)
    ids = [
        r["Id"]
        for r in s3_client.get_bucket_notification_configuration(Bucket=bucket)[
            "QueueConfigurations"
        ]
    ]
    assert sorted(ids) == ["baml-evidence-meta", "baml-evidence-pack", "someone-else"]


def test_configure_errors_are_typed(s3_client: Any) -> None:
    with pytest.raises(NotificationSetupError, match="not an SQS queue ARN"):
        configure(s3_client, "whatever", "arn:aws:sns:us-east-1:000000000000:topic")
    with pytest.raises(NotificationSetupError) as caught:
        configure(s3_client, f"missing-{uuid.uuid4().hex[:8]}", "arn:aws:sqs:us-east-1:0:q")
    assert not caught.value.transient


def test_bucket_policy_names_the_bucket(sqs_client: Any) -> None:
    url, _, arn = ensure_queues(sqs_client, f"policy-{uuid.uuid4().hex[:8]}")
    allow_bucket_to_send(sqs_client, url, arn, "my-bucket")
    attributes = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    policy = json.loads(attributes["Attributes"]["Policy"])
    assert policy == json.loads(bucket_send_policy(arn, "my-bucket"))
    statement = policy["Statement"][0]
    assert statement["Principal"] == {"Service": "s3.amazonaws.com"}
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == "arn:aws:s3:::my-bucket"


def test_s3_notifies_the_queue_for_meta_and_pack_only(s3_client: Any, sqs_client: Any) -> None:
    bucket, queue, _ = _setup(s3_client, sqs_client)
    bodies = {
        SCOPE + "meta/00000000000000000001.bamlmeta.zst": b"meta-bytes",
        SCOPE + "values/01J0000000000000000000000A.bamlpack.zst": b"pack-bytes-longer",
        SCOPE + "data/00000000000000000001.bamldata.zst": b"data",
    }
    puts = {key: s3_client.put_object(Bucket=bucket, Key=key, Body=body) for key, body in
            bodies.items()}  # fmt: skip
    messages, events = _drain(queue, want=2)
    notified = {e.key: e for e in events}
    assert set(notified) == {k for k in bodies if not k.endswith(".bamldata.zst")}
    for key, event in notified.items():
        assert event.bucket == bucket
        assert event.size == len(bodies[key])
        assert event.etag == puts[key]["ETag"].strip('"')
        assert event.version_id == puts[key]["VersionId"]
        assert event.sequencer
    # The remaining messages are the s3:TestEvents S3 sends when the rules are saved.
    tests = [m for m in messages if not parse_s3_event(m.body)]
    assert all(json.loads(m.body)["Event"] == "s3:TestEvent" for m in tests)
    assert len(messages) == len(tests) + 2


def _field_paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        paths = set()
        for k, v in value.items():
            paths |= {f"{prefix}.{k}"} | _field_paths(v, f"{prefix}.{k}")
        return paths
    if isinstance(value, list):
        return set().union(*(_field_paths(v, f"{prefix}[]") for v in value))
    return set()


def test_directory_bucket_event_has_the_structure_s3_delivers(
    s3_client: Any, sqs_client: Any
) -> None:
    bucket, queue, _ = _setup(s3_client, sqs_client)
    key = SCOPE + "meta/a b+c=d%e/00000000000000000002.bamlmeta.zst"
    put = s3_client.put_object(Bucket=bucket, Key=key, Body=b"0123456789")
    messages, events = _drain(queue, want=1)
    [delivered] = [json.loads(m.body) for m in messages if parse_s3_event(m.body)]
    real = delivered["Records"][0]
    ours = s3_event(
        bucket,
        key,
        10,
        put["ETag"],
        put["VersionId"],
        real["s3"]["object"]["sequencer"],
        datetime.now(UTC),
        region=real["awsRegion"],
    )["Records"][0]
    assert _field_paths(ours) == _field_paths(real)
    assert ours["s3"]["object"] == real["s3"]["object"]
    assert ours["s3"]["object"]["key"] == encode_event_key(key)
    assert "a+b%2Bc%3Dd%25e" in real["s3"]["object"]["key"]
    assert ours["s3"]["bucket"]["arn"] == real["s3"]["bucket"]["arn"]
    assert ours["s3"]["configurationId"] == real["s3"]["configurationId"]
    assert ours["eventName"] == real["eventName"]
    assert [e.key for e in events] == [key]
