"""Typed errors of the projection queue.

Exception tree::

    BamlStudioError
    └── QueueError                     a queue operation failed (terminal unless marked)
        ├── QueueUnavailable           transient: the backend did not answer (SQS endpoint down,
        │                              throttled, 5xx; SQLite busy past its timeout; an OS error)
        ├── QueueNotFound              the queue does not exist; run the setup (``ensure_queues``)
        ├── ReceiptInvalid             the receipt names no message that still holds it: it was
        │                              deleted, moved to the dead-letter queue, or received again
        ├── InvalidQueueArgument       an argument outside the SQS limits (also a ``ValueError``)
        ├── NoDeadLetterQueue          ``send_to_dead_letter`` on a queue that has none
        └── QueueRequestFailed         any other error the backend reported; ``.code``

``transient`` marks errors that may go away on retry; retry policy is ``isinstance`` plus
``transient``, never string matching. A projector that gets :class:`ReceiptInvalid` on delete has
lost its lease: another consumer owns the message now, and at-least-once delivery makes that safe.
"""

from __future__ import annotations

from baml_studio.format.errors import BamlStudioError


class QueueError(BamlStudioError):
    """A queue operation failed."""

    transient = False


class QueueUnavailable(QueueError):
    """The backend did not answer or asked us to slow down; retry with backoff."""

    transient = True


class QueueNotFound(QueueError):
    """The queue does not exist."""

    def __init__(self, queue: str) -> None:
        super().__init__(
            f"queue {queue!r} does not exist; create it first "
            "(baml_studio.queue.sqs.ensure_queues, or the data plane's setup command)"
        )
        self.queue = queue


class ReceiptInvalid(QueueError):
    """The receipt handle does not name a message that currently holds it."""

    def __init__(self, receipt: str) -> None:
        shown = receipt if len(receipt) <= 80 else receipt[:77] + "..."
        super().__init__(
            f"receipt {shown!r} names no message holding it: the message was deleted, moved to "
            "the dead-letter queue, or received again after its visibility timeout"
        )
        self.receipt = receipt


class InvalidQueueArgument(QueueError, ValueError):
    """An argument outside the limits both adapters share (the SQS limits)."""


class NoDeadLetterQueue(QueueError):
    """``send_to_dead_letter`` was called on a queue without a dead-letter queue."""


class QueueRequestFailed(QueueError):
    """The backend rejected a request for a reason not covered above."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
