"""The projection queue: SQS Standard semantics behind one port, two adapters.

- :mod:`~baml_studio.queue.port`: the :class:`Queue` Protocol and :class:`Message`.
- :mod:`~baml_studio.queue.sqlite`: the embedded default, one SQLite file (no setup).
- :mod:`~baml_studio.queue.sqs`: SQS through boto3; ``ensure_queues`` creates both queues.
- :mod:`~baml_studio.queue.config` and :mod:`~baml_studio.queue.errors`.

Bucket notifications (the messages this queue carries) live in
:mod:`baml_studio.objectstore.notifications`.
"""

from __future__ import annotations

from typing import Any

from baml_studio.queue.config import QueueSettings, SqliteQueueConfig, SqsQueueConfig
from baml_studio.queue.errors import (
    InvalidQueueArgument,
    NoDeadLetterQueue,
    QueueError,
    QueueNotFound,
    QueueRequestFailed,
    QueueUnavailable,
    ReceiptInvalid,
)
from baml_studio.queue.port import Message, Queue, QueueSender

__all__ = [
    "InvalidQueueArgument",
    "Message",
    "NoDeadLetterQueue",
    "Queue",
    "QueueError",
    "QueueNotFound",
    "QueueRequestFailed",
    "QueueSender",
    "QueueSettings",
    "QueueUnavailable",
    "ReceiptInvalid",
    "SqliteQueueConfig",
    "SqsQueueConfig",
    "open_queue",
]


def open_queue(config: SqliteQueueConfig | SqsQueueConfig, *, sqs_client: Any = None) -> Queue:
    """Open the queue a configuration names. boto3 is imported only for SQS.

    ``sqs_client`` overrides the boto3 client built from the configuration (tests pass one
    with explicit credentials); the caller then closes it.
    """
    if isinstance(config, SqliteQueueConfig):
        from baml_studio.queue.sqlite import SqliteQueue

        return SqliteQueue.open(config)
    from baml_studio.queue.sqs import SqsQueue

    return SqsQueue.open(config, sqs_client)
