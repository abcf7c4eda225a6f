"""The queue port: SQS Standard semantics behind a small Protocol.

Both adapters (:mod:`baml_studio.queue.sqlite`, :mod:`baml_studio.queue.sqs`) pass the same
conformance suite. The contract:

- **At least once.** A received message stays in the queue, invisible for the visibility timeout;
  it is gone only after :meth:`Queue.delete` with its current receipt. A consumer that does not
  delete in time sees the message delivered again, with a new receipt and a higher
  ``receive_count``.
- **Dead-letter queue.** A message already received ``max_receive_count`` times moves to the
  dead-letter queue on the receive that would deliver it again (so with the default 8, the ninth
  receive finds it gone). It keeps its body, id, original ``sent_at`` and receive count.
  :meth:`Queue.send_to_dead_letter` quarantines a message at once, with a reason.
- **Retention.** A message older than the retention period (from its send) is dropped.
- **Order** is best effort, as in SQS Standard.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from baml_studio.queue.config import (
    MAX_BODY_BYTES,
    MAX_DELAY_S,
    MAX_MESSAGES_PER_RECEIVE,
    MAX_VISIBILITY_TIMEOUT_S,
)
from baml_studio.queue.errors import InvalidQueueArgument

_NOT_SQS_TEXT = re.compile(r"[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters outside the set SQS accepts in a message body."""


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery of a message. Each receive of the same message yields a new receipt."""

    id: str
    """Stable message id assigned at send (the SQS ``MessageId``)."""

    receipt: str
    """Handle for :meth:`Queue.delete` and :meth:`Queue.change_visibility` of this delivery."""

    body: str
    """The body as sent."""

    receive_count: int
    """How many times the message has been received, this delivery included (>= 1)."""

    sent_at: float
    """Unix seconds of the original send (SQS ``SentTimestamp``, millisecond precision)."""

    dead_letter_reason: str | None = None
    """The reason given to :meth:`Queue.send_to_dead_letter`; ``None`` otherwise."""


class QueueSender(Protocol):
    """The one method a producer (a bucket's notification sink, the replay tool) needs."""

    def send(self, body: str, *, delay_s: int = 0) -> str:
        """Enqueue ``body``; return its message id once the send is durable."""
        ...


class Queue(QueueSender, Protocol):
    """A queue with SQS Standard semantics and a dead-letter queue."""

    def receive(
        self,
        max_messages: int = 10,
        wait_s: float = 0,
        visibility_timeout_s: int | None = None,
    ) -> list[Message]:
        """Lease up to ``max_messages`` visible messages.

        Waits up to ``wait_s`` seconds for the first message (long poll) and returns as soon as
        one arrives; returns ``[]`` when none did. Each returned message is invisible for
        ``visibility_timeout_s`` (the queue's default when ``None``).
        """
        ...

    def delete(self, receipt: str) -> None:
        """Remove the message for good. :class:`ReceiptInvalid` if the receipt is stale."""
        ...

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        """Make the message visible again ``timeout_s`` seconds from now (0: at once)."""
        ...

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        """Quarantine a received message: it leaves this queue for the dead-letter queue."""
        ...

    def dead_letter_queue(self) -> Queue:
        """The dead-letter queue, for inspection and replay. :class:`NoDeadLetterQueue` if none."""
        ...

    def approximate_count(self) -> int:
        """Messages held, visible or not (delayed and in flight included)."""
        ...


def check_send(body: str, delay_s: int) -> None:
    """Validate :meth:`Queue.send` arguments against the limits both adapters share (SQS's)."""
    if not isinstance(body, str):
        raise InvalidQueueArgument(f"body must be str, got {type(body).__name__}")
    if not body:
        raise InvalidQueueArgument("body must not be empty (SQS needs at least one character)")
    bad = _NOT_SQS_TEXT.search(body)
    if bad is not None:
        raise InvalidQueueArgument(
            f"body has character U+{ord(bad.group()):04X} at {bad.start()}, which SQS does not "
            "accept (allowed: tab, LF, CR and U+0020 upwards, no surrogates or U+FFFE/U+FFFF)"
        )
    size = len(body.encode("utf-8"))
    if size > MAX_BODY_BYTES:
        raise InvalidQueueArgument(
            f"body is {size} bytes; the limit is {MAX_BODY_BYTES}. Send a key, not the payload"
        )
    _check_range("delay_s", delay_s, 0, MAX_DELAY_S)


def check_reason(reason: str) -> None:
    """Validate a dead-letter reason: non-empty SQS text of at most 4096 characters."""
    if not isinstance(reason, str) or not reason or len(reason) > 4096:
        raise InvalidQueueArgument(
            f"a dead-letter reason must be a non-empty string of at most 4096 characters, "
            f"got {reason!r:.80}"
        )
    if _NOT_SQS_TEXT.search(reason) is not None:
        raise InvalidQueueArgument("a dead-letter reason must be text SQS accepts (no NUL etc.)")


def check_receive(max_messages: int, wait_s: float, visibility_timeout_s: int | None) -> None:
    """Validate :meth:`Queue.receive` arguments."""
    _check_range("max_messages", max_messages, 1, MAX_MESSAGES_PER_RECEIVE)
    if not wait_s >= 0:  # also rejects NaN
        raise InvalidQueueArgument(f"wait_s must be >= 0 seconds, got {wait_s}")
    if visibility_timeout_s is not None:
        check_visibility(visibility_timeout_s)


def check_visibility(timeout_s: int) -> None:
    """Validate a visibility timeout."""
    _check_range("visibility timeout", timeout_s, 0, MAX_VISIBILITY_TIMEOUT_S)


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQueueArgument(f"{name} must be whole seconds (int), got {value!r}")
    if not low <= value <= high:
        raise InvalidQueueArgument(f"{name} must be in {low}..{high}, got {value}")
