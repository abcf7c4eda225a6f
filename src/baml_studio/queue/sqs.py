"""The scale-out projection queue: SQS Standard through boto3.

The dead-letter queue is SQS's own: the source queue carries a redrive policy with
``maxReceiveCount`` (created by :func:`ensure_queues`), and SQS moves a message there on the
receive after its last allowed one (keeping id, body and ``SentTimestamp``).
:meth:`SqsQueue.send_to_dead_letter` sends a copy of the body to the dead-letter queue with a
``DeadLetterReason`` attribute, then deletes the source message; the copy has a new id and send
time. If that delete fails, the copy stays and the source message is delivered again (at least
once), so a quarantined message can appear in the dead-letter queue more than once.

boto3 has no type information, so the client is ``Any`` at this boundary; every botocore error is
wrapped into the tree in :mod:`baml_studio.queue.errors`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import botocore.exceptions  # type: ignore[import-untyped]  # reason: botocore ships no types

from baml_studio.jsontext import parse_json
from baml_studio.queue.config import DEAD_LETTER_SUFFIX, QueueSettings, SqsQueueConfig
from baml_studio.queue.errors import (
    InvalidQueueArgument,
    NoDeadLetterQueue,
    QueueError,
    QueueNotFound,
    QueueRequestFailed,
    QueueUnavailable,
    ReceiptInvalid,
)
from baml_studio.queue.port import (
    Message,
    Queue,
    check_reason,
    check_receive,
    check_send,
    check_visibility,
)

log = logging.getLogger(__name__)

DEAD_LETTER_REASON_ATTRIBUTE = "DeadLetterReason"
"""Message attribute carrying the reason given to ``send_to_dead_letter``."""

MAX_WAIT_PER_CALL_S = 20
"""SQS limit on ``WaitTimeSeconds``; longer waits are split into several calls."""

_WAIT_GRANULARITY_S = 0.1
"""A long poll that comes back this close to its deadline is over (SQS waits in whole seconds)."""

_MAX_NAME = 80 - len(DEAD_LETTER_SUFFIX)
_QUEUE_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{_MAX_NAME}}}")
_RECEIPT_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "InvalidReceiptHandle",  # reason: older query-protocol spelling
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
    }
)
_MISSING_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
_TRANSIENT_CODES = frozenset(
    {
        "RequestThrottled",
        "ThrottlingException",
        "Throttling",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "KmsThrottled",
        "RequestTimeout",
    }
)


def wrap_botocore_error(exc: Exception, queue: str, receipt: str | None = None) -> QueueError:
    """Map a botocore exception to the queue error tree (transient vs terminal by type)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _RECEIPT_CODES and receipt is not None:
            return ReceiptInvalid(receipt)
        if code in _MISSING_CODES:
            return QueueNotFound(queue)
        if code in _TRANSIENT_CODES or status >= 500:
            return QueueUnavailable(f"SQS {queue}: {code}: {message}")
        return QueueRequestFailed(code, f"SQS {queue}: {message}")
    if isinstance(exc, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError):
        return QueueUnavailable(f"SQS {queue} did not answer: {exc}")
    return QueueRequestFailed(type(exc).__name__, f"SQS {queue}: {exc}")


def _call(queue: str, operation: Callable[..., Any], receipt: str | None = None, **kw: Any) -> Any:
    try:
        return operation(**kw)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise wrap_botocore_error(exc, queue, receipt) from exc


def ensure_queues(
    sqs: Any, name: str, settings: QueueSettings | None = None
) -> tuple[str, str, str]:
    """Create (or reconcile) queue ``name`` and its dead-letter queue ``name-dlq``.

    The dead-letter queue keeps messages ``dead_letter_retention_s``; the source queue gets the
    visibility timeout, retention and a redrive policy with ``max_receive_count``. Safe to run
    again: existing queues get the attributes set anew. Returns ``(queue_url, dlq_url, arn)``
    where ``arn`` is the source queue's ARN (the target of the bucket notification rules).
    """
    settings = settings or QueueSettings()
    if not _QUEUE_NAME.fullmatch(name):
        raise InvalidQueueArgument(
            f"queue name {name!r} must be 1..{_MAX_NAME} characters of "
            "A-Z, a-z, 0-9, '-' and '_' (the dead-letter queue adds '-dlq')"
        )
    dlq_name = name + DEAD_LETTER_SUFFIX
    dlq_url = _call(dlq_name, sqs.create_queue, QueueName=dlq_name)["QueueUrl"]
    _call(
        dlq_name,
        sqs.set_queue_attributes,
        QueueUrl=dlq_url,
        Attributes={"MessageRetentionPeriod": str(settings.dead_letter_retention_s)},
    )
    dlq_arn = _queue_arn(sqs, dlq_name, dlq_url)
    queue_url = _call(name, sqs.create_queue, QueueName=name)["QueueUrl"]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(settings.max_receive_count)}
    _call(
        name,
        sqs.set_queue_attributes,
        QueueUrl=queue_url,
        Attributes={
            "VisibilityTimeout": str(settings.visibility_timeout_s),
            "MessageRetentionPeriod": str(settings.retention_s),
            "RedrivePolicy": json.dumps(redrive),
        },
    )
    return queue_url, dlq_url, _queue_arn(sqs, name, queue_url)


def _queue_arn(sqs: Any, name: str, url: str) -> str:
    response = _call(name, sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["QueueArn"])
    return str(response["Attributes"]["QueueArn"])


def find_dead_letter_url(sqs: Any, queue_url: str) -> str | None:
    """The URL of the queue named by ``queue_url``'s redrive policy, or ``None`` without one."""
    attributes = _call(
        queue_url, sqs.get_queue_attributes, QueueUrl=queue_url, AttributeNames=["RedrivePolicy"]
    ).get("Attributes", {})
    raw = attributes.get("RedrivePolicy")
    if not raw:
        return None
    try:
        arn = parse_json(raw, ValueError)["deadLetterTargetArn"]
        if not isinstance(arn, str):
            raise TypeError("deadLetterTargetArn is not a string")
        _, _, _, _, account, dlq_name = arn.split(":", 5)
    except (ValueError, KeyError, TypeError) as exc:
        raise QueueRequestFailed(
            "InvalidRedrivePolicy",
            f"SQS {queue_url}: cannot read RedrivePolicy {raw!r:.200}: {exc}",
        ) from exc
    response = _call(
        dlq_name, sqs.get_queue_url, QueueName=dlq_name, QueueOwnerAWSAccountId=account
    )
    return str(response["QueueUrl"])


def make_client(
    region: str, endpoint_url: str | None = None, credentials: Mapping[str, str] | None = None
) -> Any:
    """A boto3 SQS client whose read timeout outlasts a 20 s long poll."""
    import boto3  # type: ignore[import-untyped]  # reason: boto3 ships no types
    from botocore.config import Config  # type: ignore[import-untyped]  # reason: as above

    config = Config(
        connect_timeout=5,
        read_timeout=MAX_WAIT_PER_CALL_S + 10,
        retries={"mode": "standard", "max_attempts": 3},
    )
    return boto3.client(
        "sqs", region_name=region, endpoint_url=endpoint_url, config=config, **(credentials or {})
    )


class SqsQueue:
    """A :class:`~baml_studio.queue.port.Queue` over one SQS Standard queue URL."""

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        dead_letter_url: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._url = queue_url
        self._dead_letter_url = dead_letter_url
        self._monotonic = monotonic
        self._owns_client = owns_client

    @classmethod
    def open(cls, config: SqsQueueConfig, client: Any | None = None) -> SqsQueue:
        """Find (or with ``config.create``, create) the queue and its dead-letter queue."""
        owns = client is None
        if client is None:
            client = make_client(config.region, config.endpoint_url)
        dlq_url: str | None
        if config.create:
            url, dlq_url, _ = ensure_queues(client, config.name, config.settings)
        else:
            url = _call(config.name, client.get_queue_url, QueueName=config.name)["QueueUrl"]
            dlq_url = find_dead_letter_url(client, url)
        return cls(client, url, dead_letter_url=dlq_url, owns_client=owns)

    @property
    def url(self) -> str:
        return self._url

    def send(self, body: str, *, delay_s: int = 0) -> str:
        check_send(body, delay_s)
        response = _call(
            self._url,
            self._client.send_message,
            QueueUrl=self._url,
            MessageBody=body,
            DelaySeconds=delay_s,
        )
        return str(response["MessageId"])

    def receive(
        self,
        max_messages: int = 10,
        wait_s: float = 0,
        visibility_timeout_s: int | None = None,
    ) -> list[Message]:
        """Long-polls in calls of at most 20 s; a fractional ``wait_s`` rounds up to seconds."""
        check_receive(max_messages, wait_s, visibility_timeout_s)
        extra: dict[str, Any] = {}
        if visibility_timeout_s is not None:
            extra["VisibilityTimeout"] = visibility_timeout_s
        deadline = self._monotonic() + wait_s
        while True:
            remaining = deadline - self._monotonic()
            response = _call(
                self._url,
                self._client.receive_message,
                QueueUrl=self._url,
                MaxNumberOfMessages=max_messages,
                WaitTimeSeconds=min(MAX_WAIT_PER_CALL_S, max(0, math.ceil(remaining))),
                AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                MessageAttributeNames=[DEAD_LETTER_REASON_ATTRIBUTE],
                **extra,
            )
            messages = _messages(self._url, response)
            if messages or deadline - self._monotonic() < _WAIT_GRANULARITY_S:
                return messages

    def delete(self, receipt: str) -> None:
        _call(
            self._url,
            self._client.delete_message,
            receipt,
            QueueUrl=self._url,
            ReceiptHandle=receipt,
        )

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        check_visibility(timeout_s)
        _call(
            self._url,
            self._client.change_message_visibility,
            receipt,
            QueueUrl=self._url,
            ReceiptHandle=receipt,
            VisibilityTimeout=timeout_s,
        )

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        if self._dead_letter_url is None:
            raise NoDeadLetterQueue(
                f"queue {self._url} has no dead-letter queue; create it with ensure_queues"
            )
        check_reason(reason)
        _call(
            self._dead_letter_url,
            self._client.send_message,
            QueueUrl=self._dead_letter_url,
            MessageBody=message.body,
            MessageAttributes={
                DEAD_LETTER_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": reason}
            },
        )
        self.delete(message.receipt)

    def dead_letter_queue(self) -> SqsQueue:
        if self._dead_letter_url is None:
            raise NoDeadLetterQueue(f"queue {self._url} has no dead-letter queue")
        return SqsQueue(self._client, self._dead_letter_url, monotonic=self._monotonic)

    def approximate_count(self) -> int:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = _call(
            self._url, self._client.get_queue_attributes, QueueUrl=self._url, AttributeNames=names
        )["Attributes"]
        return sum(int(attributes.get(name, 0)) for name in names)

    def close(self) -> None:
        """Close the boto3 client if this queue created it."""
        if self._owns_client:
            self._client.close()


def _messages(url: str, response: Mapping[str, Any]) -> list[Message]:
    """The messages of a ``ReceiveMessage`` answer. An entry this code cannot read (no receipt
    handle or body, an attribute that is not a number) is logged at ERROR and left out: it
    comes back after its visibility timeout, and the queue's redrive policy dead-letters it once
    it has been received ``maxReceiveCount`` times. An answer whose ``Messages`` is not a list
    is :class:`QueueUnavailable`."""
    entries = response.get("Messages", [])
    if not isinstance(entries, list):
        raise QueueUnavailable(f"{url}: ReceiveMessage answered Messages that is not a list")
    out = []
    for raw in entries:
        try:
            out.append(_message(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            shown = str(raw.get("MessageId") if isinstance(raw, Mapping) else raw)[:80]
            log.error("%s: a received message cannot be read (%r: %s); left out", url, shown, exc)
    return out


def _message(raw: Mapping[str, Any]) -> Message:
    attributes = raw.get("Attributes", {})
    reason = raw.get("MessageAttributes", {}).get(DEAD_LETTER_REASON_ATTRIBUTE, {})
    text = {name: raw[name] for name in ("MessageId", "ReceiptHandle", "Body")}
    if not all(isinstance(value, str) and value for value in text.values()):
        raise TypeError("MessageId, ReceiptHandle or Body is not text")
    dead_letter_reason = reason.get("StringValue")
    if dead_letter_reason is not None and not isinstance(dead_letter_reason, str):
        raise TypeError(f"{DEAD_LETTER_REASON_ATTRIBUTE} is not text")
    return Message(
        id=text["MessageId"],
        receipt=text["ReceiptHandle"],
        body=text["Body"],
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
        sent_at=int(attributes.get("SentTimestamp", 0)) / 1000,
        dead_letter_reason=dead_letter_reason,
    )


if TYPE_CHECKING:
    _conforms: type[Queue] = SqsQueue  # mypy checks SqsQueue against the port
