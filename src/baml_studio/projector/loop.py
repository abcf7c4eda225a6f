"""The projector as a long-running service: worker threads on the queue, and the periodic
sweep and compaction (``baml-studio projector``)::

    run_projector(projector, stop=event, workers=N, wait_s=10, sweep=fn, compact=fn)

    worker thread × N   receive (long poll ≤ wait_s, 1 at a time) ─> ProjectorWorker.handle
                        for each message in turn
    calling thread      sweep() every ``sweep_interval_s``, compact() every
                        ``compact_interval_s`` (both first at start), the counts every
                        ``log_interval_s``; otherwise waits on ``stop``

Every worker thread has its own :class:`ProjectorWorker` (its own counters) over the
:class:`Projector`'s bucket, queue, control client and private stores, which are thread-safe.
``sweep`` and ``compact`` are callables without arguments (the CLI binds them to the projector);
an interval of 0 in :class:`ProjectorConfig` turns one off.

Stopping: set ``stop`` (the CLI does on SIGTERM and SIGINT). A worker finishes the message it
is handling, makes the rest of its leased batch visible again at once and exits; one waiting in
a long poll exits when the poll returns, so a stop takes at most ``wait_s`` plus one message.
No maintenance starts after ``stop``. ``once``: every worker exits at its first receive that
finds nothing visible (messages left for a retry with a backoff stay in the queue), and no
maintenance runs.

Nothing that fails ends the loop: a receive that fails (queue unavailable) is retried with a
capped exponential backoff; a message whose handling raises (the lease lost before the delete,
the queue failing on a visibility change, a bug) is logged by message id and counted in
``errors``, and comes back after its visibility timeout; a failed sweep or compaction is logged,
counted and tried again at its next interval. Logs carry message ids, outcomes and counts, never
message bodies or values. In ``once`` mode a receive that fails is raised to the caller instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from baml_studio.projector.service import Projector
from baml_studio.projector.worker import ProjectorWorker, WorkerStats
from baml_studio.queue.errors import QueueError, ReceiptInvalid
from baml_studio.queue.port import Message

log = logging.getLogger(__name__)

Maintenance = Callable[[], object]
"""A periodic task (sweep, compaction): no arguments; the result is ignored."""

RECEIVE_BATCH = 1
"""Messages a worker thread takes per receive. One: a message is a whole meta object (often
hundreds of executions), so a thread that took ten would work through them one after another
while the other threads wait on an empty queue, and the last of the ten would sit out its
visibility timeout meanwhile."""
RECEIVE_BACKOFF_S = 0.5
RECEIVE_BACKOFF_MAX_S = 30.0
LOG_INTERVAL_S = 60.0


@dataclass
class LoopReport:
    """What a run of the loop did."""

    worker: WorkerStats = field(default_factory=WorkerStats)
    """The counters of every worker thread, summed."""

    errors: int = 0
    """Receives and message handlings that raised (the messages come back later)."""

    sweeps: int = 0
    """Sweeps run (failed ones included)."""

    compactions: int = 0
    """Compactions run (failed ones included)."""

    maintenance_errors: int = 0
    """Sweeps and compactions that raised."""

    def as_dict(self) -> dict[str, int]:
        counts = dataclasses.asdict(self.worker)
        counts.update(
            errors=self.errors,
            sweeps=self.sweeps,
            compactions=self.compactions,
            maintenance_errors=self.maintenance_errors,
        )
        return counts


def summed(stats: list[WorkerStats]) -> WorkerStats:
    total = WorkerStats()
    for one in stats:
        for name, value in dataclasses.asdict(one).items():
            setattr(total, name, getattr(total, name) + value)
    return total


class _WorkerThread(threading.Thread):
    def __init__(
        self,
        projector: Projector,
        stop: threading.Event,
        wait_s: float,
        once: bool,
        index: int,
        receive_batch: int = RECEIVE_BATCH,
    ) -> None:
        super().__init__(name=f"projector-worker-{index}", daemon=True)
        self.worker: ProjectorWorker = projector.worker()
        self.queue = projector.queue
        self.stop = stop
        self.wait_s = wait_s
        self.receive_batch = receive_batch
        self.once = once
        self.errors = 0
        self.failure: BaseException | None = None
        """In ``once`` mode, the error that ended this thread early."""

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                messages = self.queue.receive(max_messages=self.receive_batch, wait_s=self.wait_s)
            except Exception as exc:  # the queue, or a bug in it: never end the service
                self.errors += 1
                if self.once:
                    self.failure = exc
                    return
                failures += 1
                delay = min(RECEIVE_BACKOFF_MAX_S, RECEIVE_BACKOFF_S * 2 ** min(failures, 10))
                log.warning(
                    "receive failed (%s: %s); retrying in %.1fs", type(exc).__name__, exc, delay
                )
                self.stop.wait(delay)
                continue
            failures = 0
            if not messages:
                if self.once:
                    return
                continue
            for index, message in enumerate(messages):
                if self.stop.is_set():
                    self._release(messages[index:])
                    break
                self._handle(message)

    def _handle(self, message: Message) -> None:
        try:
            self.worker.handle(message)
        except ReceiptInvalid:
            self.errors += 1
            log.warning(
                "message %s: the lease was lost before the delete (another projector has the "
                "message; redoing it is idempotent)",
                message.id,
            )
        except QueueError as exc:
            self.errors += 1
            log.warning("message %s: the queue failed: %s: %s", message.id, type(exc).__name__, exc)
        except Exception as exc:  # a bug: log it, keep serving; the message comes back
            self.errors += 1
            log.error(
                "message %s: unexpected %s; it is delivered again after its visibility timeout",
                message.id,
                type(exc).__name__,
                exc_info=True,
            )

    def _release(self, messages: list[Message]) -> None:
        """Stopping: let another projector have the leased messages not handled."""
        for message in messages:
            with contextlib.suppress(QueueError):
                self.queue.change_visibility(message.receipt, 0)


@dataclass
class _Task:
    name: str
    run: Maintenance
    interval_s: float
    due: float


def run_projector(
    projector: Projector,
    *,
    stop: threading.Event,
    workers: int = 1,
    wait_s: float = 10,
    sweep: Maintenance | None = None,
    compact: Maintenance | None = None,
    once: bool = False,
    log_interval_s: float = LOG_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
    receive_batch: int = RECEIVE_BATCH,
) -> LoopReport:
    """Serve the projection queue until ``stop`` is set (module docstring); with ``once``,
    until nothing is visible. ``receive_batch``: messages a worker takes per receive (see
    :data:`RECEIVE_BATCH`). Returns the summed counters."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if not wait_s >= 0:
        raise ValueError(f"wait_s must be >= 0 seconds, got {wait_s}")
    report = LoopReport()
    if not 1 <= receive_batch <= 10:
        raise ValueError(f"receive_batch must be 1..10 (an SQS receive), got {receive_batch}")
    threads = [
        _WorkerThread(projector, stop, wait_s, once, i, receive_batch) for i in range(workers)
    ]
    log.info("projector: %d worker(s) started%s", workers, " (once)" if once else "")
    for thread in threads:
        thread.start()
    try:
        if not once:
            _maintain(projector, stop, sweep, compact, report, threads, log_interval_s, clock)
    finally:
        if not once:
            stop.set()
        for thread in threads:
            thread.join()
    report.worker = summed([t.worker.stats for t in threads])
    report.errors = sum(t.errors for t in threads)
    _log_counts("projector stopped", report)
    failure = next((t.failure for t in threads if t.failure is not None), None)
    if failure is not None:
        raise failure
    return report


def _maintain(
    projector: Projector,
    stop: threading.Event,
    sweep: Maintenance | None,
    compact: Maintenance | None,
    report: LoopReport,
    threads: list[_WorkerThread],
    log_interval_s: float,
    clock: Callable[[], float],
) -> None:
    config = projector.config
    start = clock()
    tasks = [
        _Task(name, run, interval, start)
        for name, run, interval in (
            ("sweep", sweep, config.sweep_interval_s),
            ("compaction", compact, config.compact_interval_s),
        )
        if run is not None and interval > 0
    ]
    next_log = start + log_interval_s
    while not stop.is_set():
        for task in tasks:
            if stop.is_set() or clock() < task.due:
                continue
            _run_task(task, report)
            task.due = clock() + task.interval_s
        now = clock()
        if now >= next_log:
            report.worker = summed([t.worker.stats for t in threads])
            report.errors = sum(t.errors for t in threads)
            _log_counts("projector", report)
            next_log = now + log_interval_s
        wake = min([task.due for task in tasks] + [next_log])
        stop.wait(max(0.0, wake - clock()))


def _run_task(task: _Task, report: LoopReport) -> None:
    if task.name == "sweep":
        report.sweeps += 1
    else:
        report.compactions += 1
    began = time.monotonic()
    try:
        task.run()
    except Exception as exc:  # maintenance is retried at its next interval
        report.maintenance_errors += 1
        log.error("%s failed: %s: %s", task.name, type(exc).__name__, exc, exc_info=True)
        return
    log.info("%s done in %.1fs", task.name, time.monotonic() - began)


def _log_counts(what: str, report: LoopReport) -> None:
    log.info("%s: %s", what, " ".join(f"{k}={v}" for k, v in report.as_dict().items()))
