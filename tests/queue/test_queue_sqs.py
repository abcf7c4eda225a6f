"""SQS adapter specifics: queue setup, discovery and error wrapping (ministack on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.queue import (
    InvalidQueueArgument,
    QueueNotFound,
    QueueRequestFailed,
    QueueSettings,
    QueueUnavailable,
    ReceiptInvalid,
    SqsQueueConfig,
    open_queue,
)
from baml_studio.queue.sqs import (
    SqsQueue,
    ensure_queues,
    find_dead_letter_url,
    wrap_botocore_error,
)
from json_strategies import HOSTILE_TEXT, JSON_VALUES, UNPARSEABLE, shaped
from ministack_fixture import client


def _name() -> str:
    return f"sqs-{uuid.uuid4().hex[:12]}"


def _attributes(sqs: Any, url: str) -> dict[str, str]:
    return dict(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])


def test_ensure_queues_sets_redrive_retention_and_visibility(sqs_client: Any) -> None:
    name = _name()
    settings = QueueSettings(
        visibility_timeout_s=300, retention_s=86_400, dead_letter_retention_s=1_209_600
    )
    url, dlq_url, arn = ensure_queues(sqs_client, name, settings)
    main = _attributes(sqs_client, url)
    dlq = _attributes(sqs_client, dlq_url)
    assert arn == main["QueueArn"] and arn.endswith(f":{name}")
    assert main["VisibilityTimeout"] == "300"
    assert main["MessageRetentionPeriod"] == "86400"
    assert dlq["MessageRetentionPeriod"] == "1209600"
    redrive = json.loads(main["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq["QueueArn"]
    assert int(redrive["maxReceiveCount"]) == 8


def test_ensure_queues_is_idempotent_and_reconciles(sqs_client: Any) -> None:
    name = _name()
    first = ensure_queues(sqs_client, name)
    second = ensure_queues(sqs_client, name, QueueSettings(visibility_timeout_s=45))
    assert first == second
    assert _attributes(sqs_client, first[0])["VisibilityTimeout"] == "45"


@pytest.mark.parametrize("name", ["", "has space", "x" * 77, "dots.not.allowed"])
def test_ensure_queues_rejects_bad_names(sqs_client: Any, name: str) -> None:
    with pytest.raises(InvalidQueueArgument):
        ensure_queues(sqs_client, name)


def test_open_creates_or_discovers_the_dead_letter_queue(sqs_client: Any) -> None:
    name = _name()
    created = open_queue(SqsQueueConfig(name=name, create=True), sqs_client=sqs_client)
    found = open_queue(SqsQueueConfig(name=name), sqs_client=sqs_client)
    created.send("via created")
    [message] = found.receive()
    found.send_to_dead_letter(message, "testing discovery")
    [dead] = created.dead_letter_queue().receive()
    assert (dead.body, dead.dead_letter_reason) == ("via created", "testing discovery")


def test_a_missing_queue_is_queue_not_found(sqs_client: Any) -> None:
    with pytest.raises(QueueNotFound):
        open_queue(SqsQueueConfig(name=_name()), sqs_client=sqs_client)
    url, _, _ = ensure_queues(sqs_client, _name())
    sqs_client.delete_queue(QueueUrl=url)
    with pytest.raises(QueueNotFound):
        SqsQueue(sqs_client, url).send("gone")


def test_a_bogus_receipt_is_receipt_invalid(sqs_client: Any) -> None:
    url, dlq_url, _ = ensure_queues(sqs_client, _name())
    queue = SqsQueue(sqs_client, url, dead_letter_url=dlq_url)
    with pytest.raises(ReceiptInvalid):
        queue.delete("not-a-receipt")


def test_an_endpoint_that_does_not_answer_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        sqs = client(
            "sqs", f"http://127.0.0.1:{port}", connect_timeout=1, read_timeout=1,
        )  # fmt: skip
        queue = SqsQueue(sqs, f"http://127.0.0.1:{port}/000000000000/nothing")
        with pytest.raises(QueueUnavailable) as caught:
            queue.send("hello")
    assert caught.value.transient
    assert isinstance(caught.value.__cause__, EndpointConnectionError)


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "SendMessage",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("RequestThrottled", 403, QueueUnavailable),
        ("InternalError", 500, QueueUnavailable),
        ("Anything", 503, QueueUnavailable),
        ("AWS.SimpleQueueService.NonExistentQueue", 400, QueueNotFound),
        ("AccessDenied", 403, QueueRequestFailed),
        ("InvalidParameterValue", 400, QueueRequestFailed),
    ],
)
def test_botocore_errors_map_to_typed_errors(code: str, status: int, expected: type) -> None:
    error = wrap_botocore_error(_client_error(code, status), "q")
    assert type(error) is expected
    assert error.transient == (expected is QueueUnavailable)


def test_receipt_codes_map_to_receipt_invalid_only_with_a_receipt() -> None:
    error = _client_error("ReceiptHandleIsInvalid", 400)
    assert isinstance(wrap_botocore_error(error, "q", "r"), ReceiptInvalid)
    assert isinstance(wrap_botocore_error(error, "q"), QueueRequestFailed)


class _RedriveSqs:
    """Just enough of an SQS client for ``find_dead_letter_url``: one RedrivePolicy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        return {"Attributes": {"RedrivePolicy": self.policy}}

    def get_queue_url(self, **names: str) -> dict[str, str]:
        account, name = names["QueueOwnerAWSAccountId"], names["QueueName"]
        return {"QueueUrl": f"https://sqs.test/{account}/{name}"}


def test_a_redrive_policy_names_the_dead_letter_queue() -> None:
    policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:q-dlq"})
    assert find_dead_letter_url(_RedriveSqs(policy), "q") == "https://sqs.test/123456789012/q-dlq"


@pytest.mark.parametrize(
    "policy",
    [
        *(body.decode() for body in UNPARSEABLE),
        json.dumps({"deadLetterTargetArn": ["arn:aws:sqs:eu-west-1:1:q-dlq"]}),
        '{"deadLetterTargetArn": ' + "[" * 990 + "]" * 990 + "}",
    ],
)
def test_a_redrive_policy_that_cannot_be_read_is_invalid(policy: str) -> None:
    with pytest.raises(QueueRequestFailed, match="cannot read RedrivePolicy"):
        find_dead_letter_url(_RedriveSqs(policy), "q")


@settings(max_examples=100, deadline=None)
@given(
    HOSTILE_TEXT
    | shaped({"deadLetterTargetArn": st.text(alphabet=":ab", max_size=12) | JSON_VALUES}).map(
        json.dumps
    )
)
def test_fuzz_redrive_policies(policy: str) -> None:
    with contextlib.suppress(QueueRequestFailed):
        url = find_dead_letter_url(_RedriveSqs(policy), "q")
        assert url.startswith("https://sqs.test/") if policy else url is None


GOOD_MESSAGE = {
    "MessageId": "m-good",
    "ReceiptHandle": "r-good",
    "Body": "{}",
    "Attributes": {"ApproximateReceiveCount": "2", "SentTimestamp": "1800000000000"},
}
RECEIVED = shaped(
    {
        "MessageId": st.just("m1"),
        "ReceiptHandle": st.just("r1"),
        "Body": HOSTILE_TEXT,
        "Attributes": shaped(
            {
                "ApproximateReceiveCount": st.sampled_from(["1", "x", ""]),
                "SentTimestamp": st.sampled_from(["0", "1.5", "-"]),
            }
        ),
        "MessageAttributes": JSON_VALUES,
    }
)


class _ReceiveSqs:
    """Just enough of an SQS client for ``receive``: one canned ReceiveMessage answer."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def receive_message(self, **_: Any) -> Any:
        return self.answer


@settings(max_examples=200, deadline=None)
@given(st.lists(RECEIVED | JSON_VALUES, max_size=4))
def test_fuzz_received_entries_are_messages_or_left_out(entries: list[Any]) -> None:
    """An entry of a ReceiveMessage answer that cannot be read is left out (it comes back after
    its visibility timeout and is dead-lettered by the redrive policy); the others are read.
    It was a KeyError, TypeError or ValueError out of receive()."""
    queue = SqsQueue(_ReceiveSqs({"Messages": [*entries, GOOD_MESSAGE]}), "https://sqs.test/q")
    messages = queue.receive(max_messages=10)
    assert messages[-1].receipt == "r-good" and messages[-1].receive_count == 2
    for message in messages:
        assert isinstance(message.body, str) and message.body
        assert isinstance(message.receipt, str) and isinstance(message.receive_count, int)


@pytest.mark.parametrize("answer", [{"Messages": "x"}, {"Messages": {"a": 1}}])
def test_an_answer_whose_messages_is_not_a_list_is_unavailable(answer: Any) -> None:
    with pytest.raises(QueueUnavailable, match="not a list"):
        SqsQueue(_ReceiveSqs(answer), "https://sqs.test/q").receive(max_messages=1)
