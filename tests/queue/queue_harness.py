"""Adapters under one harness so the conformance tests run unchanged against both."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from baml_studio.queue.config import QueueSettings
from baml_studio.queue.port import Message, Queue
from baml_studio.queue.sqlite import SqliteQueue
from baml_studio.queue.sqs import SqsQueue, ensure_queues


class FakeClock:
    """Wall clock for message times (visibility, delay, retention) that tests move by hand."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SqliteHarness:
    kind = "sqlite"
    visibility_s = 30
    """The SQLite clock is fake, so the real default applies without waiting."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clock = FakeClock()
        self._queues: list[SqliteQueue] = []

    def make(self, settings: QueueSettings | None = None) -> SqliteQueue:
        path = self.tmp_path / f"queue-{len(self._queues)}.sqlite3"
        queue = SqliteQueue(path, settings=settings, clock=self.clock)
        self._queues.append(queue)
        return queue

    def receive_after(
        self, queue: Queue, seconds: float, slack_s: float = 5, **kw: Any
    ) -> list[Message]:
        """Let ``seconds`` of message time pass, then receive (no real waiting)."""
        self.clock.advance(seconds)
        return queue.receive(**kw)

    def close(self) -> None:
        for queue in self._queues:
            queue.close()


class SqsHarness:
    kind = "sqs"
    visibility_s = 2
    """Short, so tests that wait for a lease to lapse stay quick."""

    def __init__(self, sqs: Any) -> None:
        self.sqs = sqs

    def make(self, settings: QueueSettings | None = None) -> SqsQueue:
        name = f"conf-{uuid.uuid4().hex[:12]}"
        url, dlq_url, _ = ensure_queues(self.sqs, name, settings)
        return SqsQueue(self.sqs, url, dead_letter_url=dlq_url)

    def receive_after(
        self, queue: Queue, seconds: float, slack_s: float = 5, **kw: Any
    ) -> list[Message]:
        """One long poll of ``seconds + slack_s``; it returns as soon as a message shows."""
        return queue.receive(wait_s=seconds + slack_s, **kw)

    def close(self) -> None:
        pass
