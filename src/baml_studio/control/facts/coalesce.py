"""Coalescing concurrent small batches into one lookup and one insert per relation.

Every waiting batch, whatever its relation, goes into one queue. Each of ``writers`` flusher
threads (started on first use) takes the oldest waiting batch, waits up to ``linger`` for more
(or until ``max_rows`` are waiting), and hands the group to ``write_group``, which decides every
batch of the group with one ledger lookup and writes the new ones with one fact insert per
relation present and one ledger insert. A ClickHouse insert costs about the same for one row
as for a thousand (a new part), so the fewer groups, the more batches per second; a projector
sends one execution's batches of several relations at once, and one group takes them all. Each
caller blocks in :meth:`Coalescer.submit` until its batch is decided and visible; a failure of
the group's writes fails every caller of the group that was not decided before it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from baml_studio.control.facts.batch import BatchKey, BatchResult
from baml_studio.control.facts.ledger import LedgerEntry


@dataclass(eq=False)
class Pending:
    """One batch waiting for its group; ``write_group`` fills ``result`` (and ``visible``,
    the ledger entry now visible under its id) or ``error`` for this batch alone."""

    key: BatchKey
    rows: pa.Table
    """The public rows, as the caller gave them."""
    content_digest: str
    done: threading.Event | None = None
    """Set once the batch is decided, for a caller parked in :meth:`Coalescer.submit` (made
    there only: a caller on an event loop is told through ``waker``)."""
    result: BatchResult | None = None
    visible: LedgerEntry | None = None
    error: BaseException | None = None
    group_failed: bool = False
    waker: Waker | None = None
    """Told (with the other decided items of its group that share it) once this item is
    decided, besides ``done``: an event loop's callers await instead of parking a thread."""
    settle: Callable[[], None] | None = None
    """What the ``waker``'s caller runs for this item once told (the awaiting side's own)."""
    cached: LedgerEntry | None = None
    """The entry the ledger cache holds under the id when it was queued: the group decides
    it without a ledger query (after the group's generation check)."""

    @property
    def decided(self) -> bool:
        return self.result is not None or self.error is not None

    def outcome(self) -> BatchResult:
        """The decided result; raises the item's own error, or :class:`GroupWriteFailed` if
        its group's writes failed."""
        if self.group_failed:
            raise GroupWriteFailed(
                f"writing {self.key.relation} batch {self.key.batch_id} failed: {self.error}"
            ) from self.error
        if self.error is not None:
            raise self.error
        if self.result is None:
            raise RuntimeError(f"batch {self.key.batch_id} was left undecided by its group")
        return self.result


class Waker(Protocol):
    def wake(self, items: Sequence[Pending]) -> None:
        """``items`` (of one group) are decided; called on the flusher's thread."""


WriteGroup = Callable[[Sequence[Pending]], None]
"""Decides and writes one group (batches of any relations); raises if the group's writes
failed."""


class CoalescerClosed(RuntimeError):
    """The store was closed while a batch was waiting; nothing of it was written."""


class GroupWriteFailed(RuntimeError):
    """The insert of a caller's group failed; ``__cause__`` is the group's one failure (each
    caller gets its own instance, so no exception is raised in two threads)."""


class Coalescer:
    """One queue, ``writers`` flusher threads; :meth:`submit` blocks until the batch's group
    is written."""

    def __init__(
        self,
        write_group: WriteGroup,
        *,
        linger_s: float,
        max_rows: int,
        writers: int = 1,
        busy_linger_s: float | None = None,
        busy_at: int = 64,
    ) -> None:
        if writers < 1:
            raise ValueError(f"writers must be at least 1, got {writers}")
        self.write_group = write_group
        self.linger_s = linger_s
        self.busy_linger_s = linger_s if busy_linger_s is None else busy_linger_s
        """How long a flusher lingers when it finds ``busy_at`` or more batches already
        waiting: under sustained load more of them share the group's statements (each
        ClickHouse statement has a fixed cost), while a lone batch keeps ``linger_s``."""
        self.busy_at = busy_at
        self.max_rows = max_rows
        self.writers = writers
        self._queue: deque[Pending] = deque()
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def submit(self, item: Pending) -> BatchResult:
        """Queue ``item``, wait until it is decided, and return its result; re-raise its own
        error, or :class:`GroupWriteFailed` if its group's writes failed."""
        done = item.done = threading.Event()
        self.enqueue(item)
        done.wait()
        return item.outcome()

    def enqueue(self, item: Pending) -> None:
        """Queue ``item`` without waiting: ``item.done`` (if any) is set and its ``waker`` told
        once it is decided. Raises :class:`CoalescerClosed`."""
        with self._cond:
            if self._closed:
                raise CoalescerClosed(f"the fact store is closed; {item.key.batch_id} not written")
            if not self._threads:
                for index in range(self.writers):
                    thread = threading.Thread(
                        target=self._run, name=f"facts-coalesce-{index}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
            was_empty = not self._queue
            self._queue.append(item)
            self._queued_rows += item.rows.num_rows
            # wake the flushers only when one may act: the queue stopped being empty (one
            # waits for work) or a group is full (one lingers for it); a wake-up per batch
            # cost a Condition round trip under the GIL for each of thousands of batches
            if was_empty or self._queued_rows >= self.max_rows:
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            group = self._next_group()
            if group is None:
                return
            if group:
                self._write(group)
            del group  # not held (rows and all) while the next group gathers

    def _write(self, group: list[Pending]) -> None:
        """Write ``group``, then tell its callers (each one's failure if the write failed)."""
        try:
            self.write_group(group)
        except Exception as exc:  # every undecided caller of the group gets the failure
            for item in group:
                if not item.decided:
                    item.error, item.group_failed = exc, True
        finally:
            wakers: dict[int, tuple[Waker, list[Pending]]] = {}
            for item in group:
                if item.done is not None:
                    item.done.set()
                if item.waker is not None:
                    wakers.setdefault(id(item.waker), (item.waker, []))[1].append(item)
            for waker, items in wakers.values():
                waker.wake(items)

    def linger_for(self, waiting: int) -> float:
        """Seconds a flusher lingers when it finds ``waiting`` batches queued."""
        return self.busy_linger_s if waiting >= self.busy_at else self.linger_s

    def _next_group(self) -> list[Pending] | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queue) or self._closed)
            if not self._queue:
                return None
            deadline = time.monotonic() + self.linger_for(len(self._queue))
            while self._queued_rows < self.max_rows and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if not self._queue:  # another writer took them while this one lingered
                return [] if not self._closed else None
            group = [self._queue.popleft()]
            rows = group[0].rows.num_rows
            while self._queue and rows + self._queue[0].rows.num_rows <= self.max_rows:
                item = self._queue.popleft()
                rows += item.rows.num_rows
                group.append(item)
            self._queued_rows -= rows
            return group

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued, then stop the flusher threads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout_s)
