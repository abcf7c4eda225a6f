"""Coalescing concurrent small batches of one relation into one lookup and one insert.

Each relation has a lane: a queue and one flusher thread, started on first use. The flusher
takes the oldest waiting batch, waits up to ``linger`` for more (or until ``max_rows`` are
waiting), and hands the group to ``write_group``, which decides every batch of the group with
one ledger lookup and writes the new ones with one fact insert and one ledger insert. Each
caller blocks in :meth:`Coalescer.submit` until its batch is decided and visible; a failure of
the group's writes fails every caller of the group that was not decided before it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    done: threading.Event = field(default_factory=threading.Event)
    result: BatchResult | None = None
    visible: LedgerEntry | None = None
    error: BaseException | None = None
    group_failed: bool = False

    @property
    def decided(self) -> bool:
        return self.result is not None or self.error is not None


WriteGroup = Callable[[str, Sequence[Pending]], None]
"""Decides and writes one group of one relation; raises if the group's writes failed."""


class CoalescerClosed(RuntimeError):
    """The store was closed while a batch was waiting; nothing of it was written."""


class GroupWriteFailed(RuntimeError):
    """The insert of a caller's group failed; ``__cause__`` is the group's one failure (each
    caller gets its own instance, so no exception is raised in two threads)."""


class _Lane:
    def __init__(self, relation: str, owner: Coalescer) -> None:
        self.relation = relation
        self.owner = owner
        self.queue: deque[Pending] = deque()
        self.queued_rows = 0
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(
            target=self.run, name=f"facts-coalesce-{relation}", daemon=True
        )

    def put(self, item: Pending) -> None:
        with self.cond:
            if self.closed:
                raise CoalescerClosed(f"the fact store is closed; {item.key.batch_id} not written")
            self.queue.append(item)
            self.queued_rows += item.rows.num_rows
            self.cond.notify_all()

    def run(self) -> None:
        while True:
            group = self.next_group()
            if group is None:
                return
            try:
                self.owner.write_group(self.relation, group)
            except Exception as exc:  # every undecided caller of the group gets the failure
                for item in group:
                    if not item.decided:
                        item.error, item.group_failed = exc, True
            finally:
                for item in group:
                    item.done.set()

    def next_group(self) -> list[Pending] | None:
        linger, max_rows = self.owner.linger_s, self.owner.max_rows
        with self.cond:
            self.cond.wait_for(lambda: bool(self.queue) or self.closed)
            if not self.queue:
                return None
            deadline = time.monotonic() + linger
            while self.queued_rows < max_rows and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.cond.wait(remaining)
            group = [self.queue.popleft()]
            rows = group[0].rows.num_rows
            while self.queue and rows + self.queue[0].rows.num_rows <= max_rows:
                item = self.queue.popleft()
                rows += item.rows.num_rows
                group.append(item)
            self.queued_rows -= rows
            return group

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class Coalescer:
    """Lanes per relation; :meth:`submit` blocks until the batch's group is written."""

    def __init__(self, write_group: WriteGroup, *, linger_s: float, max_rows: int) -> None:
        self.write_group = write_group
        self.linger_s = linger_s
        self.max_rows = max_rows
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, item: Pending) -> BatchResult:
        """Queue ``item``, wait until it is decided, and return its result; re-raise its own
        error, or :class:`GroupWriteFailed` if its group's writes failed."""
        self._lane(item.key.relation).put(item)
        item.done.wait()
        if item.group_failed:
            raise GroupWriteFailed(
                f"writing {item.key.relation} batch {item.key.batch_id} failed: {item.error}"
            ) from item.error
        if item.error is not None:
            raise item.error
        if item.result is None:
            raise RuntimeError(f"batch {item.key.batch_id} was left undecided by its group")
        return item.result

    def _lane(self, relation: str) -> _Lane:
        with self._lock:
            if self._closed:
                raise CoalescerClosed("the fact store is closed")
            lane = self._lanes.get(relation)
            if lane is None:
                lane = self._lanes[relation] = _Lane(relation, self)
                lane.thread.start()
            return lane

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued, then stop the flusher threads."""
        with self._lock:
            self._closed = True
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.close()
        for lane in lanes:
            lane.thread.join(timeout_s)
