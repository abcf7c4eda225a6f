"""One flush: authorize every object, PUT in the ordering guarantee's order, then advance state.

Order of PUTs: function tables, large values and packs (phase 1, up to ``workers`` at once; packs,
the last and largest, on a thread of their own); every phase-1 PUT has finished before any segment
is sent. Phase-1 objects may arrive in batches while the collector still reads and packs the rest
(``arriving``): one thread authorizes the batches in turn (the segments with the first) and each
batch's PUTs start as soon as its answers are in. Then the data segments, one task per stream and
the streams concurrently, each stream's in sequence order (a PUT starts only after the previous one
of its stream finished); every data task has finished before any meta segment is sent; then the meta
segments the same way, for streams whose data all stored. So the global order of the three phases is
kept and, per stream, sequences never overtake each other. A failure stops every task at its next
object (PUTs already running finish); the flush then raises the first failure in plan order, after
all tasks have stopped. A failed PUT is retried (re-authorizing first: ``stored`` means the earlier
PUT landed, ``upload_required`` means PUT again); after ``put_attempts`` the flush raises and
nothing later in the order is sent. A 412 means the object exists: re-authorize and expect
``stored``. ``conflict`` on a value or table counts as stored; on a pack it stops the flush before
any segment (the pack is dropped from the journal so the next flush builds a new one under a new
flush id); on a segment it is reported, never overwritten, and its plane stops there (a data
conflict also holds back the stream's meta). A 413 from authorize (the collector never plans an
object over ``max_object_bytes`` nor a call over ``max_objects_per_authorize``, but the gateway's
limits may have changed since the config was read) splits the request, as the contract says:
``too_many_objects`` re-chunks at the ``details.limit`` it names (kept for the rest of the flush),
``object_too_large`` drops the object at ``details.index`` and re-authorizes the others, any other
413 halves the request. A 413 for a single object, or on its PUT, is terminal for that object: it
becomes a ``REJECTED`` problem in the report carrying the ``GatewayRejected``/``UploadFailed`` and
is not sent; a value, table or pack stays local and unmarked (skipped: the rest ships, the next
flush plans it again), a segment stops its plane like a conflict (reported, never passed by the
cursor). Every 413 is counted in ``too_large_answers`` so the publisher re-reads its configuration.
Only after the meta segments are stored: cursors advance, shipped values and tables (and pack
members) are appended to the shipped ledger with one fsync, the journal forgets shipped packs,
and (if configured) shipped segments are deleted.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeGuard

from baml_studio.publisher.client import Authorized, GatewayPort, PutOutcome
from baml_studio.publisher.errors import (
    GatewayProtocolError,
    GatewayRejected,
    PublisherError,
    UploadFailed,
)
from baml_studio.publisher.plan import (
    FlushPlan,
    Kind,
    Outgoing,
    Problem,
    ProblemCode,
    StreamBatch,
)
from baml_studio.publisher.retention import delete_files
from baml_studio.publisher.state import Cursor, JournalPack, PublishState
from baml_studio.store.layout import Plane


@dataclass(slots=True)
class FlushReport:
    flush_id: str
    complete: bool = False
    uploaded: list[str] = field(default_factory=list)
    """Keys PUT by this flush, in completion order (phase 1 and the streams run concurrently)."""
    stored: list[str] = field(default_factory=list)
    """Keys the gateway already had (``stored``, or ``conflict`` on a value or table)."""
    conflicts: list[str] = field(default_factory=list)
    """Segment or pack keys with a different object in the bucket: a local bug, reported."""
    problems: list[Problem] = field(default_factory=list)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    objects: int = 0
    original_bytes: int = 0
    compressed_bytes: int = 0
    too_large_answers: int = 0
    """413 answers (authorize or PUT): the gateway's limits are below the config's."""


@dataclass(slots=True)
class _Target:
    euid: str
    flush_id: str
    obj: Outgoing
    answer: Authorized | None = None
    rejected: PublisherError | None = None
    """A 413 for this object's chunk or PUT: terminal, the object is not sent."""


TOO_LARGE = 413


class _Stop(Exception):
    """A pack conflict: nothing after the first phase may be sent."""


PUT_WORKERS = 8
"""Concurrent PUTs of one flush (phase-1 objects, or streams in phase 2)."""


def run_flush(
    plan: FlushPlan,
    gateway: GatewayPort,
    state: PublishState,
    *,
    max_objects: int,
    put_attempts: int = 3,
    retry_delay: float = 0.2,
    release_segments: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    workers: int = PUT_WORKERS,
    clock: Callable[[], float] = time.time,
    arriving: Iterable[Sequence[Outgoing]] = (),
) -> FlushReport:
    """Ship ``plan``. Raises GatewayError or UploadFailed when the flush must be retried.

    ``arriving`` yields more phase-1 objects (tables, large values, packs) that the collector
    adds to ``plan`` while this runs (``collect_cas``): each batch is authorized, on a thread of
    its own, and its PUTs started while the next batch is being built; the segments still wait
    for every phase-1 PUT."""
    report = FlushReport(plan.flush_id)
    shipper = _Shipper(gateway, report, put_attempts, retry_delay, sleep)
    segments = _segment_targets(plan)
    by_obj = {id(t.obj): t for t in segments}
    shipped = {(b.euid, plane): set[int]() for b in plan.streams for plane in Plane}
    with (
        ThreadPoolExecutor(max(1, workers), thread_name_prefix="baml-put") as pool,
        ThreadPoolExecutor(1, thread_name_prefix="baml-put-pack") as packs,
        ThreadPoolExecutor(1, thread_name_prefix="baml-authorize") as authorizing,
    ):
        tasks = _Tasks(pool, packs)
        authorizer = _Authorizer(gateway, report, max_objects, shipper.lock)
        first = _PhaseOne(authorizer, authorizing, tasks, shipper)
        try:
            waiting = segments  # authorized with the first phase-1 batch: fewer calls
            for batch in itertools.chain([[*plan.cas, *plan.packs]], arriving):
                if tasks.halted.is_set():
                    break  # a failure: wait() raises it
                if batch:
                    first.add(_phase_one_targets(plan, batch), also=waiting)
                    waiting = []
            first.add([], also=waiting)
        except BaseException:
            tasks.halted.set()
            raise
        try:
            first.wait()
        except _Stop:
            _summarize(plan, report)
            state.write_journal([JournalPack(p.flush_id or "", p.members) for p in plan.packs
                                 if not any(t.obj is p and t.answer and t.answer.state == "conflict"
                                            for t in first.targets)])  # fmt: skip
            return report
        data_ok: dict[bytes, bool] = {}
        tasks.run([partial(_ship_plane, shipper, by_obj, b.data, shipped[(b.euid, Plane.DATA)],
                           tasks.halted, data_ok, b.euid) for b in plan.streams])  # fmt: skip
        tasks.run([partial(_ship_plane, shipper, by_obj, b.meta, shipped[(b.euid, Plane.META)],
                           tasks.halted) for b in plan.streams if data_ok.get(b.euid)])  # fmt: skip
    _summarize(plan, report)
    _finish(plan, state, shipped, report, release_segments, clock(), shipper.unshipped)
    report.complete = not report.conflicts and not any(not p.skipped for p in report.problems)
    return report


def _summarize(plan: FlushPlan, report: FlushReport) -> None:
    """The plan's figures and problems into ``report`` (the plan is complete by now)."""
    report.objects = plan.objects
    report.original_bytes = plan.original_bytes
    report.problems[:0] = plan.problems


class _Tasks:
    """Runs callables on the pool; the first failure halts the ones not yet started."""

    def __init__(self, pool: ThreadPoolExecutor, urgent: ThreadPoolExecutor | None = None) -> None:
        self._pool = pool
        self._urgent = urgent or pool
        self.halted = threading.Event()

    def start(
        self, calls: Sequence[Callable[[], object]], *, urgent: bool = False
    ) -> list[Future[None]]:
        """Submit ``calls``; ``urgent`` ones go to their own thread, not behind queued ones."""
        pool = self._urgent if urgent else self._pool
        return [pool.submit(self._guarded, call) for call in calls]

    def run(self, calls: Sequence[Callable[[], object]]) -> None:
        """Wait for every call, then raise the first failure in ``calls`` order."""
        _raise_first([f.exception() for f in self.start(calls)])

    def _guarded(self, call: Callable[[], object]) -> None:
        if self.halted.is_set():
            return
        try:
            call()
        except BaseException:
            self.halted.set()
            raise


def _raise_first(errors: Iterable[BaseException | None]) -> None:
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


class _PhaseOne:
    """Authorizes batches of targets one call after another on ``thread``, starting the PUTs
    of each batch as soon as its answers are in."""

    def __init__(
        self,
        authorizer: _Authorizer,
        thread: ThreadPoolExecutor,
        tasks: _Tasks,
        shipper: _Shipper,
    ) -> None:
        self._authorizer, self._thread, self._tasks, self._shipper = (
            authorizer, thread, tasks, shipper
        )  # fmt: skip
        self._steps: list[Future[list[Future[None]]]] = []
        self.targets: list[_Target] = []

    def add(self, targets: list[_Target], *, also: list[_Target]) -> None:
        """Authorize ``targets`` and start their PUTs; authorize ``also`` in the same calls."""
        if targets or also:
            self.targets += targets
            self._steps.append(self._thread.submit(self._authorize, targets, also))

    def _authorize(self, targets: list[_Target], also: list[_Target]) -> list[Future[None]]:
        if self._tasks.halted.is_set():
            return []
        try:
            self._authorizer.run([*targets, *also])
        except BaseException:
            self._tasks.halted.set()
            raise
        # packs come last (built once every file is read) and are the biggest: they must not
        # wait behind large values still queued, or the flush ends with one long PUT alone
        urgent = bool(targets) and all(t.obj.kind is Kind.PACK for t in targets)
        return self._tasks.start([partial(self._shipper.ship, t) for t in targets], urgent=urgent)

    def wait(self) -> None:
        """Wait for every call and PUT, then raise the first failure in the order the batches
        were added (a batch's authorize call before its PUTs)."""
        errors: list[BaseException | None] = []
        for step in self._steps:
            errors.append(step.exception())
            if errors[-1] is None:
                errors += [put.exception() for put in step.result()]
        _raise_first(errors)


def _phase_one_targets(plan: FlushPlan, objects: Sequence[Outgoing]) -> list[_Target]:
    carrier = plan.carrier.hex() if plan.carrier else ""
    return [_Target(carrier, o.flush_id or plan.flush_id, o) for o in objects]


def _segment_targets(plan: FlushPlan) -> list[_Target]:
    return [_Target(batch.euid.hex(), plan.flush_id, o)
            for batch in plan.streams for o in (*batch.data, *batch.meta)]  # fmt: skip


class _Authorizer:
    """Authorize calls of at most ``limit`` objects sharing one euid and flush id; a 413 splits
    the call (see the module docstring) and may lower ``limit`` for the calls after it."""

    def __init__(
        self, gateway: GatewayPort, report: FlushReport, limit: int, lock: threading.Lock
    ) -> None:
        self._gateway, self._report, self.limit = gateway, report, max(1, limit)
        self._lock = lock
        """The report's lock (PUT threads update the report meanwhile)."""

    def run(self, targets: Sequence[_Target]) -> None:
        groups: dict[tuple[str, str], list[_Target]] = {}
        for target in targets:
            groups.setdefault((target.euid, target.flush_id), []).append(target)
        for (euid, flush_id), group in groups.items():
            start = 0
            while start < len(group):
                chunk = group[start : start + self.limit]
                start += len(chunk)
                self._call(euid, flush_id, chunk)

    def _call(self, euid: str, flush_id: str, chunk: list[_Target]) -> None:
        try:
            answers = self._gateway.authorize(
                euid, flush_id, [t.obj.request_entry() for t in chunk]
            )
        except GatewayRejected as exc:
            if exc.status != TOO_LARGE:
                raise
            with self._lock:
                self._report.too_large_answers += 1
            if len(chunk) == 1:
                chunk[0].rejected = exc
                return
            for part in self._split(chunk, exc):
                self._call(euid, flush_id, part)
            return
        for target, answer in zip(chunk, answers, strict=True):
            target.answer = answer

    def _split(self, chunk: list[_Target], exc: GatewayRejected) -> list[list[_Target]]:
        """Smaller calls after a 413 naming ``chunk``; every part is shorter than ``chunk``."""
        index, limit = exc.details.get("index"), exc.details.get("limit")
        if exc.code == "object_too_large" and _is_int(index) and 0 <= index < len(chunk):
            chunk[index].rejected = exc
            return [chunk[:index] + chunk[index + 1 :]]
        size = (len(chunk) + 1) // 2
        if exc.code == "too_many_objects" and _is_int(limit) and 1 <= limit < len(chunk):
            size = self.limit = min(self.limit, limit)
        return [chunk[start : start + size] for start in range(0, len(chunk), size)]


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class _Shipper:
    def __init__(
        self,
        gateway: GatewayPort,
        report: FlushReport,
        attempts: int,
        delay: float,
        sleep: Callable[[float], None],
    ) -> None:
        self._gateway = gateway
        self._report = report
        self._attempts = max(1, attempts)
        self._delay = delay
        self._sleep = sleep
        self.lock = threading.Lock()
        """Guards the report: several PUT threads and the authorize thread update it."""
        self.unshipped: set[int] = set()
        """``id`` of each object refused with a 413: not in the bucket, not marked shipped."""

    def ship(self, target: _Target) -> bool:
        """True once the object is in the bucket; False on a segment conflict or a 413."""
        for attempt in range(self._attempts):
            if target.rejected is not None:
                return self._reject(target, target.rejected)
            answer = target.answer
            if answer is None:
                raise GatewayProtocolError("object was never authorized")
            if answer.state == "stored":
                with self.lock:
                    self._report.stored.append(answer.key)
                return True
            if answer.state == "conflict":
                return self._conflict(target, answer)
            if answer.upload_url is None or answer.required_headers is None:
                raise GatewayProtocolError(f"upload_required without URL for {answer.key}")
            try:
                outcome = self._gateway.put(
                    answer.upload_url, answer.required_headers, target.obj.body
                )
            except UploadFailed as exc:
                if exc.status == TOO_LARGE:
                    with self.lock:
                        self._report.too_large_answers += 1
                    return self._reject(target, exc)
                if attempt + 1 == self._attempts:
                    raise
                self._sleep(self._delay * (2**attempt))
            else:
                if outcome is PutOutcome.CREATED:
                    with self.lock:
                        self._report.uploaded.append(answer.key)
                        self._report.compressed_bytes += len(target.obj.body)
                    return True
            target.answer = self._reauthorize(target)
        raise UploadFailed(
            f"object not stored after {self._attempts} attempts",
            key=target.answer.key if target.answer else "",
        )

    def _reject(self, target: _Target, error: PublisherError) -> bool:
        obj = target.obj
        where = obj.source or Path(f"<{obj.kind.value} {target.flush_id}>")
        segment = obj.kind in (Kind.META, Kind.DATA)
        consequence = "; the plane waits for it" if segment else "; not shipped, kept locally"
        problem = Problem(where, f"gateway refused {obj.kind.value} of {len(obj.body)} bytes: "
                          f"{error}{consequence}", not segment, ProblemCode.REJECTED,
                          len(obj.body), error)  # fmt: skip
        with self.lock:
            self._report.problems.append(problem)
            self.unshipped.add(id(obj))
        return False

    def _reauthorize(self, target: _Target) -> Authorized:
        return self._gateway.authorize(target.euid, target.flush_id, [target.obj.request_entry()])[
            0
        ]

    def _conflict(self, target: _Target, answer: Authorized) -> bool:
        with self.lock:
            if target.obj.kind in (Kind.VALUE, Kind.TABLE):
                self._report.stored.append(answer.key)
                return True
            self._report.conflicts.append(answer.key)
        if target.obj.kind is Kind.PACK:
            raise _Stop
        return False


def _ship_plane(
    shipper: _Shipper,
    by_obj: dict[int, _Target],
    objects: list[Outgoing],
    shipped: set[int],
    halted: threading.Event,
    results: dict[bytes, bool] | None = None,
    euid: bytes = b"",
) -> bool:
    """Ship ``objects`` in order; False at the first conflict (or halt). The outcome also goes
    to ``results[euid]`` when given (one writer per key: the stream's own task)."""
    ok = True
    for obj in objects:
        if halted.is_set() or not shipper.ship(by_obj[id(obj)]):
            ok = False
            break
        if obj.sequence is not None:
            shipped.add(obj.sequence)
    if results is not None:
        results[euid] = ok
    return ok


def _advance(start: int, done: set[int]) -> int:
    cursor = start
    while cursor + 1 in done:
        cursor += 1
    return cursor


def _finish(
    plan: FlushPlan,
    state: PublishState,
    shipped: dict[tuple[bytes, Plane], set[int]],
    report: FlushReport,
    release_segments: bool,
    now: float,
    unshipped: set[int],
) -> None:
    for batch in plan.streams:
        cursor = _new_cursor(batch, shipped)
        if cursor != batch.cursor:
            state.write_cursor(batch.euid, cursor)
            if release_segments:
                _release(state, batch, cursor)
        report.cursors[batch.euid.hex()] = cursor
    cids = [o.cid for o in plan.cas if o.cid is not None and id(o) not in unshipped]
    cids += [c for pack in plan.packs if id(pack) not in unshipped for c in pack.members]
    state.mark_shipped(cids, now=now)
    state.clear_journal()


def _new_cursor(batch: StreamBatch, shipped: dict[tuple[bytes, Plane], set[int]]) -> Cursor:
    meta = shipped.get((batch.euid, Plane.META), set()) | batch.skipped[Plane.META]
    data = shipped.get((batch.euid, Plane.DATA), set()) | batch.skipped[Plane.DATA]
    return Cursor(_advance(batch.cursor.meta, meta), _advance(batch.cursor.data, data))


def _release(state: PublishState, batch: StreamBatch, cursor: Cursor) -> None:
    paths = [state.layout.segment_path(batch.euid, Plane.META, s)
             for s in range(batch.cursor.meta + 1, cursor.meta + 1)]  # fmt: skip
    paths += [state.layout.segment_path(batch.euid, Plane.DATA, s)
              for s in range(batch.cursor.data + 1, cursor.data + 1)]  # fmt: skip
    delete_files(state.layout, paths)
