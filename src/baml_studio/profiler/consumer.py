"""The consumer: turns hot-path events into CAS objects, data segments and meta segments.

One background thread owns everything here. Each pass drains the event deque into per-execution
buffers; when data is due (size target, publish interval, flush or close) it publishes, in this
order: CAS objects for every value the pending facts reference, one meta segment with the new
``StreamStarted``/``EngineStarted``/``RootStarted`` records (meta-pre), the data segments, and one
meta segment with the ``RootEnded`` of every execution whose data is now all committed
(meta-post). Every failure is a counted loss in the execution's health counters or in
:class:`ProfilerStats`; nothing raises out of a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from baml_studio.format.data import encode_data_segment
from baml_studio.format.ids import value_cid
from baml_studio.format.meta import encode_meta_segment
from baml_studio.format.records import (
    ROOT_ENDED_FLAG_ROOT_STARTED_LOST,
    CctContext,
    CctCounters,
    CctSection,
    DataGroup,
    DataSegment,
    EdgeKind,
    EngineStarted,
    ErrorCapture,
    ErrorKind,
    ErrorSource,
    ExecutionHealth,
    Fact,
    MetaRecord,
    MetaSegment,
    NormalContext,
    RootEnded,
    RootStarted,
    RootStatus,
    RuntimeAnnotation,
    SpanEnd,
    SpanStart,
    StreamStarted,
    TerminalErrorRef,
    ThreadEnd,
    ThreadEndStatus,
    ThreadStart,
    ThrowSite,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)
from baml_studio.profiler import events as ev
from baml_studio.profiler import snapshot
from baml_studio.profiler.events import EngineState, Execution, H
from baml_studio.profiler.runtime import Recorder
from baml_studio.store.errors import StoreFailureReason
from baml_studio.store.results import (
    AdmissionGate,
    Committed,
    Conflict,
    Indeterminate,
    Lost,
    Published,
    Reused,
)
from baml_studio.store.writer import StreamStore

CODEC_VALUE = 1
FACT_BYTES_ESTIMATE = 120
CONTEXT_BYTES_ESTIMATE = 180
_LOSS_BY_STORE_REASON = {
    StoreFailureReason.DISK_GUARD_EXCEEDED: ValueLossReason.DISK_GUARD_EXCEEDED,
    StoreFailureReason.STORE_UNAVAILABLE: ValueLossReason.STORE_UNAVAILABLE,
}


@dataclass(eq=False, slots=True)
class _PendingValue:
    """A ValueOccurrence or ErrorCapture waiting for its CAS object's publication result."""

    fact: Fact
    cid: bytes | None
    size: int


@dataclass(eq=False, slots=True)
class Buffer:
    """What the consumer holds for one execution between publications."""

    ex: Execution
    facts: list[Fact | _PendingValue] = field(default_factory=list)
    cct: dict[bytes, list[int]] = field(default_factory=dict)
    defined: set[bytes] = field(default_factory=set)
    first_pending_ns: int | None = None
    pending_bytes: int = 0
    seqs: list[int] = field(default_factory=list)
    root_started_published: bool = False
    root_started_lost: bool = False
    ended: bool = False
    captures: int = 0
    links: int = 0


class Consumer:
    """Single-threaded publisher of one profiler's stream."""

    def __init__(
        self,
        recorder: Recorder,
        store: StreamStore | None,
        *,
        baml_version: str,
        os_arch: str,
        pid: int,
        publish_interval_s: float | None,
        segment_target_bytes: int,
        max_value_bytes: int,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.rec = recorder
        self.store = store
        self.baml_version = baml_version
        self.os_arch = os_arch
        self.pid = pid
        self.interval_ns = None if publish_interval_s is None else int(publish_interval_s * 1e9)
        self.target = segment_target_bytes
        self.max_value_bytes = max_value_bytes
        self.clock = clock
        self.buffers: dict[Execution, Buffer] = {}
        self.pending_bytes = 0
        self.engines: list[EngineState] = []
        self.roots: list[Buffer] = []
        self.cas: dict[bytes, bytes] = {}
        self.cas_known: set[bytes] = set()
        self.terminal_meta: list[MetaRecord] = []

    # --- draining --------------------------------------------------------------------------

    def drain(self, limit: int | None = None) -> int:
        """Apply queued hot-path events, oldest first: all of them, or at most ``limit``."""
        events = self.rec.events
        handled = 0
        while events and (limit is None or handled < limit):
            event = events.popleft()
            handled += 1
            try:
                self._apply(event)
            except Exception:
                self.rec.stats.internal_errors += 1
        return handled

    def _buffer(self, ex: Execution) -> Buffer:
        buf = self.buffers.get(ex)
        if buf is None:
            buf = self.buffers[ex] = Buffer(ex)
        return buf

    def _add(self, buf: Buffer, item: Fact | _PendingValue, size: int) -> None:
        if buf.first_pending_ns is None:
            buf.first_pending_ns = self.clock()
        buf.facts.append(item)
        buf.pending_bytes += size
        self.pending_bytes += size

    def _apply(self, event: tuple[Any, ...]) -> None:
        op, ex = event[0], event[1]
        buf = self._buffer(ex)
        if op == ev.CALL_ENDED:
            self._call_ended(buf, event)
        elif op == ev.SPAN_STARTED:
            (_, _, call, parent_call, thread, key, fid, site, edge, started, sel, roles) = event
            runtime = RuntimeAnnotation(0, ex.runtime_id) if edge == EdgeKind.ROOT else None
            fact = SpanStart(
                call, parent_call, thread, NormalContext(key), fid, site, EdgeKind(edge),
                started, sel, roles, runtime,
            )  # fmt: skip
            self._add(buf, fact, FACT_BYTES_ESTIMATE)
        elif op == ev.VALUE:
            self._value(buf, event)
        elif op == ev.ERROR:
            self._error(buf, event)
        elif op == ev.THREAD_STARTED:
            self._add(buf, ThreadStart(*event[2:]), FACT_BYTES_ESTIMATE)
        elif op == ev.THREAD_ENDED:
            _, _, thread, ended, status = event
            self._add(buf, ThreadEnd(thread, ended, ThreadEndStatus(status)), 60)
        elif op == ev.ROOT_STARTED:
            if not ex.engine.announced:
                ex.engine.announced = True
                self.engines.append(ex.engine)
            self.roots.append(buf)
        elif op == ev.ROOT_ENDED:
            buf.ended = True

    def _call_ended(self, buf: Buffer, event: tuple[Any, ...]) -> None:
        _, _, key, status, inclusive, child, await_ns, await_count, span_end = event
        counters = buf.cct.get(key)
        if counters is None:
            counters = buf.cct[key] = [0] * 10
            buf.pending_bytes += CONTEXT_BYTES_ESTIMATE
            self.pending_bytes += CONTEXT_BYTES_ESTIMATE
            if buf.first_pending_ns is None:
                buf.first_pending_ns = self.clock()
        counters[0] += 1
        counters[2 + int(status)] += 1
        counters[6] += inclusive
        counters[7] += child
        counters[8] += await_ns
        counters[9] += await_count
        if span_end is not None:
            counters[1] += 1
            call, ended, status = span_end
            self._add(buf, SpanEnd(call, ended, status, inclusive), 70)

    def _encode(
        self, snap: snapshot.Snapshot | None, *, charged: bool = True
    ) -> tuple[bytes | None, ValueLossReason | None]:
        """Encode a snapshot; ``charged`` values release their pending-value budget."""
        if snap is None:
            return None, ValueLossReason.ENCODE_FAILED
        if charged:
            self.rec.pending_value_bytes -= snapshot.charge(snap)
        try:
            body = snapshot.encode(snap)
        except Exception:
            return None, ValueLossReason.ENCODE_FAILED
        if len(body) > self.max_value_bytes:
            return None, ValueLossReason.VALUE_TOO_LARGE
        return body, None

    def _stage(self, body: bytes) -> bytes:
        cid = value_cid(CODEC_VALUE, body)
        if cid not in self.cas_known:
            self.cas[cid] = body
        return cid

    def _value(self, buf: Buffer, event: tuple[Any, ...]) -> None:
        _, _, call, key, role, snap, loss = event
        body = None
        if loss is None:
            body, loss = self._encode(snap)
        context = NormalContext(key)
        if body is None or loss is not None:
            lost_reason = loss if loss is not None else ValueLossReason.ENCODE_FAILED
            lost = ValueOccurrence(call, context, ValueRole(role), ValueLost(lost_reason))
            self._add(buf, lost, 80)
            return
        cid = self._stage(body)
        fact = ValueOccurrence(call, context, ValueRole(role), ValueAvailable(cid, 1, len(body)))
        self._add(buf, _PendingValue(fact, cid, len(body)), 130)

    def _error(self, buf: Buffer, event: tuple[Any, ...]) -> None:
        call, capture_id, fresh, payload = event[2], event[4], event[5], event[6]
        if fresh and payload is not None:
            throw_call, throw_key, fid, site, snap = payload
            body, loss = self._encode(snap, charged=False)
            lost = ValueLost(loss or ValueLossReason.ENCODE_FAILED)
            state = lost if body is None else ValueAvailable(b"\0" * 32, 1, 0)
            capture = ErrorCapture(
                capture_id, throw_call, NormalContext(throw_key), fid,
                ThrowSite(*site) if site is not None else None,
                ErrorKind.FRESH, ErrorSource.BYTECODE, state,
            )  # fmt: skip
            if body is None:
                self._add(buf, capture, 200)
            else:
                cid = self._stage(body)
                capture = ErrorCapture(
                    capture.capture_id, capture.throw_call, capture.context,
                    capture.throw_function_id, capture.throw_site, capture.kind, capture.source,
                    ValueAvailable(cid, 1, len(body)),
                )  # fmt: skip
                self._add(buf, _PendingValue(capture, cid, len(body)), 200)
            buf.captures += 1
        self._add(buf, TerminalErrorRef(call, capture_id), 90)
        buf.links += 1

    # --- publishing ------------------------------------------------------------------------

    def due(self) -> bool:
        if not self.buffers and not self.roots:
            return False
        if self.pending_bytes >= self.target:
            return True
        if self.interval_ns is None:
            return False
        now = self.clock()
        return any(
            (buf.first_pending_ns is not None and now - buf.first_pending_ns >= self.interval_ns)
            or (buf.ended and not buf.facts and not buf.cct)
            for buf in self.buffers.values()
        )

    def publish(self) -> None:
        """Publish everything pending, in the order CAS → meta-pre → data → meta-post. An
        indeterminate publication blocks every later one until resolved, so it is resolved
        before each step: a transient failure costs its own step, not the rest of the cycle."""
        self._resolve()
        cas_losses = self._publish_cas()
        self._resolve()
        self._publish_meta_pre()
        self._resolve()
        self._publish_data(cas_losses)
        self._resolve()
        self._publish_meta_post()

    def _resolve(self) -> None:
        if self.store is not None and self.store.indeterminate is not None:
            self.store.resolve_indeterminate()

    def _gate_closed(self) -> bool:
        return self.store is None or self.store.gate != AdmissionGate.OPEN

    def _publish_cas(self) -> dict[bytes, ValueLossReason]:
        losses: dict[bytes, ValueLossReason] = {}
        staged, self.cas = self.cas, {}
        if not staged:
            return losses
        if self._gate_closed():
            reason = self._closed_reason()
            self.rec.stats.cas_lost += len(staged)
            return dict.fromkeys(staged, reason)
        assert self.store is not None
        results = self.store.publish_cas_batch([(CODEC_VALUE, body) for body in staged.values()])
        for cid, result in zip(staged, results, strict=True):
            loss = _cas_loss(result)
            if loss is None:
                self.cas_known.add(cid)
                if isinstance(result, Reused):
                    self.rec.stats.cas_reused += 1
                else:
                    self.rec.stats.cas_published += 1
            else:
                self.rec.stats.cas_lost += 1
                losses[cid] = loss
        if len(self.cas_known) > 1_000_000:
            self.cas_known.clear()
        return losses

    def _closed_reason(self) -> ValueLossReason:
        if self.store is not None and self.store.gate == AdmissionGate.DISK:
            return ValueLossReason.DISK_GUARD_EXCEEDED
        return ValueLossReason.STORE_UNAVAILABLE

    def _publish_meta(self, records: list[MetaRecord]) -> bool:
        if self.store is None:
            return False
        store = self.store
        euid = self.rec.euid

        def encode(seq: int) -> bytes:
            recs = records
            if seq == 1 and not isinstance(records[0], StreamStarted):
                recs = [self._stream_started(), *records]
            return encode_meta_segment(MetaSegment(seq, euid, store.high_water.data, tuple(recs)))

        ok = isinstance(store.publish_meta(encode), Committed)
        if ok:
            self.rec.stats.meta_segments_published += 1
        else:
            self.rec.stats.meta_batch_lost += 1
        return ok

    def _stream_started(self) -> StreamStarted:
        return StreamStarted(self.pid, self.rec.zero_unix_ns, self.baml_version, self.os_arch)

    def _engine_record(self, engine: EngineState) -> EngineStarted:
        program = self.rec.program(engine)
        cid: bytes | None = program.table_cid
        if self._gate_closed() or not self._publish_table(program.table_body):
            cid = None
        if cid is None:
            self.rec.stats.function_table_publish_failed += 1
        return EngineStarted(engine.engine_id, program.program_id, cid)

    def _publish_table(self, body: bytes) -> bool:
        """Publish an engine's function table, retrying a transient failure (an indeterminate
        publication, resolved first, or an I/O error) up to :data:`TABLE_ATTEMPTS` times: an
        engine announced without its table loses its functions' definitions for good, while
        its values and segments get the next cycle."""
        store = self.store
        assert store is not None
        for attempt in range(TABLE_ATTEMPTS):
            result = store.publish_cas(2, body)
            if _cas_loss(result) is None:
                return True
            if isinstance(result, Conflict) or self._gate_closed() or attempt + 1 == TABLE_ATTEMPTS:
                return False
            self.rec.stats.function_table_publish_retried += 1
            self._resolve()
        return False

    def _publish_meta_pre(self) -> None:
        engines, self.engines = self.engines, []
        roots, self.roots = self.roots, []
        if not engines and not roots:
            return
        try:
            records: list[MetaRecord] = [self._engine_record(e) for e in engines]
            records += [RootStarted(b.ex.root, b.ex.started_ns, b.ex.runtime_id) for b in roots]
            if self._gate_closed():
                self.terminal_meta.extend(records)
                return
            published = self._publish_meta(records)
        except BaseException:  # an internal error is a failed publication, not a silent drop
            self._meta_pre_failed(engines, roots)
            raise
        if not published:
            self._meta_pre_failed(engines, roots)
            return
        for buf in roots:
            buf.root_started_published = True

    def _meta_pre_failed(self, engines: list[EngineState], roots: list[Buffer]) -> None:
        """The engines are announced in a later cycle; the roots' RootEnded will say their
        RootStarted was lost."""
        self.engines = engines + self.engines
        for buf in roots:
            buf.root_started_lost = True

    def _group(self, buf: Buffer, cas_losses: dict[bytes, ValueLossReason]) -> DataGroup | None:
        facts: list[Fact] = []
        referenced: set[bytes] = set(buf.cct)
        for item in buf.facts:
            fact = item
            if isinstance(item, _PendingValue):
                fact = item.fact
                loss = cas_losses.get(item.cid) if item.cid is not None else None
                if loss is not None:
                    fact = _with_lost_value(fact, loss)
            assert not isinstance(fact, _PendingValue)
            context = getattr(fact, "context", None)
            if isinstance(context, NormalContext):
                referenced.add(context.key)
            facts.append(fact)
        contexts: list[CctContext] = []
        emitted: set[bytes] = set()
        for key in sorted(referenced):
            self._define(buf, key, contexts, emitted)
        if not facts and not contexts:
            return None
        section = CctSection(0, tuple(contexts), ())
        return DataGroup(buf.ex.root, section, tuple(facts))

    def _define(self, buf: Buffer, key: bytes, out: list[CctContext], emitted: set[bytes]) -> None:
        if key in emitted:
            return
        emitted.add(key)
        tup = self.rec.tuples.get(key) if key not in buf.defined else None
        if tup is not None and tup.parent_key is not None:
            self._define(buf, tup.parent_key, out, emitted)
        counters = buf.cct.get(key)
        if tup is None and counters is None:
            return
        out.append(CctContext(key, tup, _counters(counters)))

    def _publish_data(self, cas_losses: dict[bytes, ValueLossReason]) -> None:
        batch: list[tuple[Buffer, DataGroup]] = []
        for buf in sorted(self.buffers.values(), key=lambda b: b.ex.root.to_bytes()):
            if not buf.facts and not buf.cct:
                continue
            group = self._group(buf, cas_losses)
            if group is not None:
                batch.append((buf, group))
        segment: list[tuple[Buffer, DataGroup]] = []
        size = 0
        for buf, group in batch:
            if segment and size + buf.pending_bytes > self.target:
                self._publish_segment(segment)
                segment, size = [], 0
            segment.append((buf, group))
            size += buf.pending_bytes
        if segment:
            self._publish_segment(segment)
        for buf in self.buffers.values():
            buf.facts.clear()
            buf.cct.clear()
            buf.first_pending_ns = None
            buf.pending_bytes = 0
            buf.captures = buf.links = 0
        self.pending_bytes = 0

    def _publish_segment(self, segment: list[tuple[Buffer, DataGroup]]) -> None:
        groups = tuple(group for _, group in segment)
        euid = self.rec.euid
        seq: int | None = None
        if not self._gate_closed():
            assert self.store is not None
            result = self.store.publish_data(
                lambda n: encode_data_segment(DataSegment(n, euid, groups))
            )
            # An indeterminate segment sits at its final path and owns its sequence.
            if isinstance(result, Committed | Indeterminate):
                seq = result.sequence
        if seq is not None:
            self.rec.stats.data_segments_published += 1
        else:
            self.rec.stats.data_segments_lost += 1
        for buf, group in segment:
            health = buf.ex.health
            if seq is not None:
                buf.seqs.append(seq)
                buf.defined.update(c.key for c in group.cct.contexts if c.tuple is not None)
                health[H["error_captures_committed"]] += buf.captures
                health[H["terminal_error_links_committed"]] += buf.links
                continue
            if group.cct.contexts:
                health[H["cct_segment_publish_failed"]] += 1
            if group.evidence:
                health[H["evidence_segment_publish_failed"]] += 1
            health[H["error_capture_evidence_publish_failed"]] += buf.captures
            health[H["terminal_error_link_evidence_publish_failed"]] += buf.links

    def _publish_meta_post(self) -> None:
        done = [b for b in self.buffers.values() if b.ended and not b.facts and not b.cct]
        if not done:
            return
        records: list[MetaRecord] = [self._root_ended(buf) for buf in done]
        for buf in done:
            del self.buffers[buf.ex]
        if self._gate_closed():
            self.terminal_meta.extend(records)
        elif not self._publish_meta(records):
            self.rec.stats.root_ended_lost += len(records)

    def _root_ended(self, buf: Buffer) -> RootEnded:
        ex = buf.ex
        seqs = buf.seqs
        flags = ROOT_ENDED_FLAG_ROOT_STARTED_LOST if buf.root_started_lost else 0
        return RootEnded(
            ex.root, ex.ended_ns, ex.status, flags,
            min(seqs, default=0), max(seqs, default=0), len(set(seqs)),
            ExecutionHealth(*ex.health),
        )  # fmt: skip

    def abandon_open(self, now_ns: int) -> None:
        """At close: every execution still running ends as ``Abandoned``."""
        for buf in self.buffers.values():
            if not buf.ended:
                buf.ex.status = RootStatus.ABANDONED
                buf.ex.ended_ns = now_ns
                buf.ex.closed = True
                buf.ended = True

    def publish_terminal_meta(self) -> None:
        """Under a latched disk gate: one combined meta batch gets a single attempt."""
        records, self.terminal_meta = self.terminal_meta, []
        if not records or self.store is None:
            return
        store = self.store
        euid = self.rec.euid

        def encode(seq: int) -> bytes:
            recs = [self._stream_started(), *records] if seq == 1 else records
            return encode_meta_segment(MetaSegment(seq, euid, store.high_water.data, tuple(recs)))

        if not isinstance(store.publish_meta(encode, terminal=True), Committed):
            self.rec.stats.meta_batch_lost += 1
            self.rec.stats.root_ended_lost += sum(isinstance(r, RootEnded) for r in records)


def _counters(values: list[int] | None) -> CctCounters:
    return CctCounters() if values is None else CctCounters(*values)


TABLE_ATTEMPTS = 3
"""Attempts at publishing an engine's function table before it is announced without one."""


def _cas_loss(result: object) -> ValueLossReason | None:
    if isinstance(result, Published | Reused):
        return None
    if isinstance(result, Conflict):
        return ValueLossReason.CAS_CONFLICT
    if isinstance(result, Lost):
        return _LOSS_BY_STORE_REASON.get(result.reason, ValueLossReason.CAS_WRITE_FAILED)
    return ValueLossReason.CAS_WRITE_FAILED


def _with_lost_value(fact: Fact, loss: ValueLossReason) -> Fact:
    if isinstance(fact, ValueOccurrence):
        return ValueOccurrence(fact.call, fact.context, fact.role, ValueLost(loss))
    if isinstance(fact, ErrorCapture):
        return ErrorCapture(
            fact.capture_id, fact.throw_call, fact.context, fact.throw_function_id,
            fact.throw_site, fact.kind, fact.source, ValueLost(loss),
        )  # fmt: skip
    return fact
