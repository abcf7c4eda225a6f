"""Configuration of the projection queue: its semantics and where it lives.

:class:`QueueSettings` holds the SQS semantics both adapters share. :class:`SqliteQueueConfig`
and :class:`SqsQueueConfig` choose the adapter; :func:`baml_studio.queue.open_queue` takes either.
Read the configuration once at the entry point and pass it down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_VISIBILITY_TIMEOUT_S = 43_200
"""SQS limit: 12 hours."""

MAX_DELAY_S = 900
"""SQS limit: 15 minutes."""

MAX_MESSAGES_PER_RECEIVE = 10
"""SQS limit on one ``ReceiveMessage``."""

MAX_BODY_BYTES = 262_144
"""The classic SQS body limit (256 KiB); an S3 event is far smaller."""

MIN_RETENTION_S = 60
MAX_RETENTION_S = 1_209_600
"""SQS limits on ``MessageRetentionPeriod``: 1 minute to 14 days."""

DEAD_LETTER_SUFFIX = "-dlq"
"""The dead-letter queue of queue ``name`` is ``name + DEAD_LETTER_SUFFIX``."""


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """SQS semantics shared by both adapters."""

    visibility_timeout_s: int = 30
    """How long a received message stays invisible unless deleted or its visibility changed."""

    max_receive_count: int = 8
    """A message received this many times moves to the dead-letter queue on its next receive."""

    retention_s: int = 345_600
    """How long an undeleted message is kept, from its send (4 days); older ones are dropped."""

    dead_letter_retention_s: int = 1_209_600
    """Retention in the dead-letter queue (14 days), measured from the original send as in SQS."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
            problems.append(
                f"visibility_timeout_s={self.visibility_timeout_s} (0..{MAX_VISIBILITY_TIMEOUT_S})"
            )
        if not 1 <= self.max_receive_count <= 1000:
            problems.append(f"max_receive_count={self.max_receive_count} (1..1000)")
        for name in ("retention_s", "dead_letter_retention_s"):
            value = getattr(self, name)
            if not MIN_RETENTION_S <= value <= MAX_RETENTION_S:
                problems.append(f"{name}={value} ({MIN_RETENTION_S}..{MAX_RETENTION_S})")
        if problems:
            raise ValueError("invalid QueueSettings: " + ", ".join(problems))


@dataclass(frozen=True, slots=True)
class SqliteQueueConfig:
    """The embedded default: one SQLite database file holding a queue and its dead-letter queue."""

    path: Path
    """The database file (created with its directory when missing)."""

    name: str = "projection"
    """Queue name inside the file; the dead-letter queue is ``name + "-dlq"``."""

    settings: QueueSettings = field(default_factory=QueueSettings)
    """Visibility timeout, receive limit and retention."""

    poll_interval_s: float = 0.05
    """Long-poll granularity for sends made by other processes (same-process sends wake at once)."""

    busy_timeout_s: float = 10.0
    """How long a write waits for another process's transaction before ``QueueUnavailable``."""


@dataclass(frozen=True, slots=True)
class SqsQueueConfig:
    """SQS Standard through boto3 (AWS, or any SQS-compatible endpoint such as ministack)."""

    name: str = "baml-projection"
    """Queue name; the dead-letter queue is ``name + "-dlq"``."""

    region: str = "us-east-1"
    """AWS region of the queue."""

    endpoint_url: str | None = None
    """Override the SQS endpoint (tests point it at ministack on 127.0.0.1); ``None`` for AWS."""

    create: bool = False
    """Create or reconcile both queues with ``settings`` on open (``ensure_queues``)."""

    settings: QueueSettings = field(default_factory=QueueSettings)
    """Applied when ``create`` is set; otherwise the queues keep their own attributes."""

    def __post_init__(self) -> None:
        check_queue_name(self.name)


MAX_QUEUE_NAME = 80 - len(DEAD_LETTER_SUFFIX)
"""SQS allows 80 characters in a queue name; the dead-letter queue's name adds its suffix."""
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def check_queue_name(name: str) -> str:
    """``name`` if SQS accepts it and its dead-letter queue's name as a Standard queue's name:
    1 to :data:`MAX_QUEUE_NAME` ASCII letters, digits, hyphens and underscores. ``ValueError``
    naming the rule otherwise (a ``.fifo`` name is a FIFO queue, which the projection queue
    is not)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"SQS queue name {name!r} is empty; name the projection queue")
    if name.endswith(".fifo"):
        raise ValueError(
            f"SQS queue name {name!r} names a FIFO queue; the projection queue is an SQS "
            "Standard queue (drop the .fifo suffix)"
        )
    if len(name) > MAX_QUEUE_NAME or not (name.isascii() and _QUEUE_NAME.fullmatch(name)):
        raise ValueError(
            f"SQS queue name {name!r} must be 1 to {MAX_QUEUE_NAME} characters of A-Z, a-z, "
            f"0-9, '-' and '_' (its dead-letter queue is {name + DEAD_LETTER_SUFFIX!r:.100})"
        )
    return name
