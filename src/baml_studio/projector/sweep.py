"""The sweep: close executions whose stream stopped without ``RootEnded`` as ``abandoned``.

System contract, "Projection contract": the sweep lists the stream prefixes under the evidence
prefix, finds the streams whose newest meta object is older than the silence limit, and marks
their executions with a ``RootStarted`` and no matching ``RootEnded`` as ``abandoned`` with the
facts it has. :func:`sweep` does that for one scope::

    list evidence/v1/<scope>/streams/          one listing: meta and data sequences per stream
    per stream: last activity                  meta 1 + the newest readable meta object
      silent past the limit?  no -> untouched
    open executions                            meta 1 + the newest ``walk_bound`` meta objects:
                                               RootStarted without RootEnded, not in projected_v1
    gather_abandoned (gather.py)               data range, function table, definitions
    project -> values -> batches -> Lance      the worker's own steps (``ProjectorWorker``
                                               ``_ensure_values`` and ``_send``, then
                                               ``PrivateStore.write_execution``)

What the fold sees is what the local catalog sees for a dead process: ``ProcessInfo(alive=False,
data_hw = the stream's highest data sequence in the bucket, meta_hw = its highest meta sequence,
meta_gaps = meta sequences missing from the listing or unreadable)``, so ``status`` is
``abandoned``, ``index_state`` is ``no_root_ended`` (``index_corrupt`` when a meta gap follows
RootStarted) and the data range runs from one past RootStarted's meta data high water to
``data_hw``, skipping other roots' groups.

Decisions (open in the contract, made here):

* **Last activity.** Object listings carry no modification time in the ``ObjectStore`` port
  today (``ObjectInfo`` has none), so a stream's last activity is read from its evidence: the
  latest wall-clock instant its meta records carry (``StreamStarted.zero_unix_ns`` plus the
  largest ``RootStarted.started_ns``/``RootEnded.ended_ns`` of meta 1 and of the newest
  readable meta object). Records are stamped before their object is written, so this is at
  most one publish interval earlier than the object's own time. When the store does report
  a ``last_modified`` on ``ObjectInfo`` (a ``datetime`` or Unix seconds), the newest such time
  of *any* object of the stream counts too, and the later of the two wins: a stream still
  shipping data segments (one long root) is not silent. A stream with neither (meta 1 unread,
  no listing times) is *undated* and left alone. The time is the profiler host's clock: a host
  clock far behind makes its streams look older.
* **Walk bound.** A stream is read from meta 1 and its newest ``walk_bound`` meta objects
  (2,000, as the worker's walk-back). An execution whose RootStarted lies below that window
  (and not in meta 1) is not seen and stays open; RootStarted records of meta 1 count only
  when the window reaches meta 2 (otherwise their RootEnded could lie unread in between).
  Such streams are reported as ``truncated``.
* **Values.** As the worker: a referenced value missing from ``values_v1`` is ingested from
  ``cas/values/``, else the execution is ``pending``, skipped this round and reported.
* **Ids.** The sweep sends the same deterministic batch ids and row ids the worker would
  (``<root_id>.<relation>.<partition>``), so a repeated sweep, or a sweep that crashed before
  the ``projected_v1`` marker, sends identical batches (200) and upserts identical rows, and
  an execution has one fact set. An execution in ``projected_v1`` is not swept again.
* **A late RootEnded.** Swept is final, as the contract says. If the stream resumes and a
  ``RootEnded`` for a swept execution lands later (a host clock far behind, a publisher offline
  for longer than the silence limit), the worker's projection of it differs under the same
  batch ids: the control plane answers 409 ``batch_digest_conflict``; the worker sees the
  execution in ``projected_v1``, keeps it out (counted in ``late_root_ended``, logged) and goes
  on with the other executions of the object; the abandoned facts stay. To re-project it as
  ended, call :func:`reopen` for its root id (erases its facts and its private rows) and
  replay its meta object (``baml-studio replay`` finds it: tested end to end). Choose a
  silence limit well above the publisher's expected outages to keep this rare.
* **Glue.** The worker's write path is reused, not copied: the sweep builds a
  ``ProjectorWorker`` with a queue it never uses (``_NoQueue``) and calls its
  ``_ensure_values`` and ``_send``, then ``write_execution`` as ``project_meta`` does.
* **Dry run.** Lists, reads and projects (pure) to report what would be closed and how many
  batches; sends, writes and checks values nowhere.
* **Errors.** Transient errors (bucket, control plane, Lance) propagate: the next scheduled
  sweep retries. A terminal refusal of one execution (e.g. a 409) is reported under
  ``failed`` and the sweep goes on.

Cost: every run lists every object under the scope's ``streams/`` and reads meta 1 and the
newest meta object of every stream, and all meta objects (up to the bound) of every silent
stream; data segments are read only for executions it closes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from baml_studio.catalog.fold_inputs import ExecutionInputs, ExecutionMeta, ProcessInfo
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    EngineStarted,
    MetaSegment,
    RootEnded,
    RootStarted,
    StreamStarted,
)
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import EVIDENCE_ROOT, evidence_prefix
from baml_studio.objectstore.errors import ObjectStoreError
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.projector.control_client import ControlClient, new_request_id
from baml_studio.projector.errors import (
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceUnavailable,
    ProjectorError,
    ValuesPending,
)
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import DEFAULT_WALK_BOUND, gather_abandoned
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.messages import MalformedKey, parse_evidence_key
from baml_studio.projector.project import project_execution
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.queue.port import Message, Queue

log = logging.getLogger(__name__)

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class StreamListing:
    """One stream as the bucket lists it."""

    euid: str
    meta_sequences: tuple[int, ...]
    """Meta sequences present, ascending."""
    data_sequences: tuple[int, ...]
    """Data sequences present, ascending."""
    modified_s: float | None = None
    """Newest modification time (Unix seconds) the store reported for any object of the
    stream; None when it reports none (the port's ``ObjectInfo`` has no such field today)."""

    @property
    def meta_hw(self) -> int:
        return self.meta_sequences[-1] if self.meta_sequences else 0

    @property
    def data_hw(self) -> int:
        return self.data_sequences[-1] if self.data_sequences else 0


@dataclass(frozen=True, slots=True)
class OpenStream:
    """The open executions of one stream, as the fold needs them."""

    newest: MetaSegment
    """The newest readable meta object."""
    process: ProcessInfo
    executions: tuple[ExecutionMeta, ...]
    """RootStarted and no RootEnded, in execution id order."""
    truncated: bool
    """Meta objects between meta 1 and the window were not read (more than the bound)."""


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep of one scope did (or, with ``dry_run``, would do)."""

    scope: Scope
    dry_run: bool
    streams: int = 0
    """Streams listed."""
    silent: int = 0
    """Streams silent past the limit (their meta objects read; a dead stream stays silent
    and is read by every sweep)."""
    undated: tuple[str, ...] = ()
    """Streams with no datable activity (meta 1 unreadable, no listing time): left alone."""
    truncated: tuple[str, ...] = ()
    """Silent streams with more meta objects than the walk bound."""
    swept: tuple[str, ...] = ()
    """Executions closed as abandoned (dry run: that would be)."""
    already_projected: int = 0
    """Open executions already in ``projected_v1`` (swept before)."""
    pending: tuple[str, ...] = ()
    """Executions skipped because a value they reference is not ingested yet."""
    failed: tuple[tuple[str, str], ...] = ()
    """``(execution id, reason)`` of executions refused for good (e.g. a 409)."""
    batches: int = 0
    """Public batches sent (dry run: that would be)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": f"{self.scope.tenant}/{self.scope.project}/{self.scope.environment}",
            "dry_run": self.dry_run,
            "streams": self.streams,
            "silent": self.silent,
            "undated": list(self.undated),
            "truncated": list(self.truncated),
            "swept": list(self.swept),
            "already_projected": self.already_projected,
            "pending": list(self.pending),
            "failed": [{"execution_id": e, "reason": r} for e, r in self.failed],
            "batches": self.batches,
        }


@dataclass
class _Tally:
    silent: int = 0
    undated: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    swept: list[str] = field(default_factory=list)
    already: int = 0
    pending: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    batches: int = 0
    generation: str | None = None


def sweep(
    store: ObjectStore,
    scope: Scope,
    control: ControlClient,
    private_store: PrivateStore,
    *,
    silence_limit_s: float,
    now: float,
    walk_bound: int = DEFAULT_WALK_BOUND,
    dry_run: bool = False,
    config: WorkerConfig | None = None,
) -> SweepReport:
    """Close the open executions of ``scope``'s streams silent for more than
    ``silence_limit_s`` at ``now`` (Unix seconds) as ``abandoned`` (module docstring).

    ``private_store`` holds the scope's Lance datasets; ``config`` gives the catalog version,
    partition size and batch concurrency (the worker's defaults otherwise). With ``dry_run``
    nothing is written and the control plane is not called; values are not checked. Raises
    the transient ``ProjectorError`` that stopped it (``EvidenceUnavailable``,
    ``ControlPlaneUnavailable``, ``LanceCommitFailed``, ...); ``ValueError`` for a bad bound.
    """
    if walk_bound < 1:
        raise ValueError(f"walk_bound must be at least 1, got {walk_bound}")
    if silence_limit_s < 0:
        raise ValueError(f"silence_limit_s must not be negative, got {silence_limit_s}")
    cfg = config or WorkerConfig()
    worker = ProjectorWorker(
        store=store,
        queue=_NoQueue(),
        control=control,
        private_store=lambda _scope: private_store,
        config=cfg,
    )
    reader = EvidenceReader(store, scope)
    listings = list_streams(store, scope)
    tally = _Tally()
    for listing in listings:
        active = last_activity_s(reader, listing, walk_bound=walk_bound)
        if active is None:
            tally.undated.append(listing.euid)
            continue
        if now - active <= silence_limit_s:
            continue
        tally.silent += 1
        _sweep_stream(worker, reader, private_store, listing, walk_bound, dry_run, tally)
    return SweepReport(
        scope,
        dry_run,
        len(listings),
        tally.silent,
        tuple(tally.undated),
        tuple(tally.truncated),
        tuple(tally.swept),
        tally.already,
        tuple(tally.pending),
        tuple(tally.failed),
        tally.batches,
    )


def _sweep_stream(
    worker: ProjectorWorker,
    reader: EvidenceReader,
    private: PrivateStore,
    listing: StreamListing,
    walk_bound: int,
    dry_run: bool,
    tally: _Tally,
) -> None:
    found = open_executions(reader, listing, walk_bound=walk_bound)
    if found is None:
        return
    if found.truncated:
        tally.truncated.append(listing.euid)
    ids = [m.execution_id for m in found.executions]
    done = private.projected(ids) if ids else set()
    tally.already += len(done)
    todo = [m for m in found.executions if m.execution_id not in done]
    if not todo:
        return
    gathered = gather_abandoned(reader, found.newest, found.process, todo)
    for inputs in gathered.executions:
        definitions = gathered.definitions.get(inputs.meta.execution_id, [])
        _close(worker, reader, private, inputs, definitions, dry_run, tally)


def _close(
    worker: ProjectorWorker,
    reader: EvidenceReader,
    private: PrivateStore,
    inputs: ExecutionInputs,
    definitions: list[dict[str, Any]],
    dry_run: bool,
    tally: _Tally,
) -> None:
    """Project one open execution and write it as the worker writes an ended one."""
    root_id = inputs.meta.execution_id
    projection = project_execution(inputs, definitions, partition_rows=worker.config.partition_rows)
    if not dry_run:
        scope = reader.scope
        try:
            worker._ensure_values(reader, private, projection)
            if tally.generation is None:
                tally.generation = worker.control.active_generation(
                    scope, worker.config.catalog_version
                )
            tally.generation = worker._send(scope, tally.generation, projection)
            private.write_execution(
                root_id,
                root_id,
                inputs.process.process_id,
                [(rows.relation, rows.table) for rows in projection.private],
            )
        except ValuesPending as exc:
            log.info("sweep: execution %s pending: %s", root_id, exc)
            tally.pending.append(root_id)
            return
        except ProjectorError as exc:
            if exc.transient:
                raise
            log.warning("sweep: execution %s refused: %s", root_id, exc)
            tally.failed.append((root_id, f"{type(exc).__name__}: {exc}"[:1000]))
            return
        log.info("sweep: execution %s closed as abandoned", root_id)
    tally.swept.append(root_id)
    tally.batches += len(projection.public)


# --- the bucket ---------------------------------------------------------------------------------


def list_streams(store: ObjectStore, scope: Scope) -> list[StreamListing]:
    """Every stream under ``scope``'s ``streams/`` prefix with its meta and data sequences, by
    euid. Keys outside the evidence grammar are skipped; ``EvidenceUnavailable`` if the
    listing fails."""
    prefix = f"{evidence_prefix(scope)}streams/"
    meta: dict[str, list[int]] = {}
    data: dict[str, list[int]] = {}
    modified: dict[str, float] = {}
    for info in _listing(store, prefix):
        try:
            key = parse_evidence_key(info.key)
        except MalformedKey:
            log.info("sweep: skipping %r (not an evidence key)", info.key)
            continue
        if key.euid is None:
            continue
        meta.setdefault(key.euid, [])
        data.setdefault(key.euid, [])
        if key.kind == "meta" and key.sequence is not None:
            meta[key.euid].append(key.sequence)
        elif key.kind == "data" and key.sequence is not None:
            data[key.euid].append(key.sequence)
        when = _modified_s(info)
        if when is not None:
            modified[key.euid] = max(when, modified.get(key.euid, when))
    return [
        StreamListing(
            euid, tuple(sorted(meta[euid])), tuple(sorted(data[euid])), modified.get(euid)
        )
        for euid in sorted(meta)
    ]


def discover_scopes(store: ObjectStore) -> list[Scope]:
    """Every scope with at least one evidence object in the bucket (one full listing of
    ``evidence/v1/``), sorted."""
    scopes: set[Scope] = set()
    for info in _listing(store, f"{EVIDENCE_ROOT}/"):
        try:
            scopes.add(parse_evidence_key(info.key).scope)
        except MalformedKey:
            continue
    return sorted(scopes, key=lambda s: (s.tenant, s.project, s.environment))


def _listing(store: ObjectStore, prefix: str) -> Iterator[ObjectInfo]:
    try:
        yield from store.list(prefix)
    except ObjectStoreError as exc:
        raise EvidenceUnavailable(f"cannot list {prefix}: {exc}", key=prefix) from exc


def _modified_s(info: ObjectInfo) -> float | None:
    """The object's modification time, if this store reports one (see the module docstring)."""
    value = getattr(info, "last_modified", None)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# --- the meta plane of one stream -----------------------------------------------------------


def last_activity_s(
    reader: EvidenceReader, listing: StreamListing, *, walk_bound: int = DEFAULT_WALK_BOUND
) -> float | None:
    """The stream's last activity in Unix seconds (module docstring): the later of its
    evidence time (meta 1 and the newest readable meta object; at most ``walk_bound`` tries
    for the latter) and the listing's ``modified_s``; None if neither is known."""
    first = _meta_or_none(reader, listing.euid, 1) if 1 in listing.meta_sequences else None
    newest = _newest(reader, listing, walk_bound)
    evidence = _evidence_time_ns(first, newest)
    known = (listing.modified_s, None if evidence is None else evidence / NS)
    times = [t for t in known if t is not None]
    return max(times) if times else None


def open_executions(
    reader: EvidenceReader, listing: StreamListing, *, walk_bound: int = DEFAULT_WALK_BOUND
) -> OpenStream | None:
    """The stream's executions with RootStarted and no RootEnded, read from meta 1 and the
    newest ``walk_bound`` meta objects (module docstring); None if no meta object reads."""
    euid = bytes.fromhex(listing.euid)
    meta_hw = listing.meta_hw
    lowest = max(1, meta_hw - walk_bound + 1)
    present = set(listing.meta_sequences)
    gaps = {seq for seq in range(1, meta_hw + 1) if seq not in present}
    window = [s for s in listing.meta_sequences if s >= lowest or s == 1]
    started: dict[ThreadRef, tuple[RootStarted, int, int]] = {}
    ended: set[ThreadRef] = set()
    engines: dict[int, EngineStarted] = {}
    stream_started: StreamStarted | None = None
    newest: MetaSegment | None = None
    for seq in window:
        segment = _meta_or_none(reader, listing.euid, seq)
        if segment is None:
            gaps.add(seq)
            continue
        newest = segment
        if seq == 1 and segment.records and isinstance(segment.records[0], StreamStarted):
            stream_started = segment.records[0]
        roots_count = seq != 1 or lowest <= 2
        for record in segment.records:
            if isinstance(record, EngineStarted):
                engines.setdefault(record.engine_id, record)
            elif isinstance(record, RootStarted) and record.root.euid == euid and roots_count:
                started.setdefault(record.root, (record, seq, segment.data_high_water))
            elif isinstance(record, RootEnded) and record.root.euid == euid:
                ended.add(record.root)
    if newest is None:
        return None
    process = ProcessInfo(
        euid, False, stream_started, meta_hw, listing.data_hw, tuple(sorted(gaps))
    )
    metas = [
        ExecutionMeta(root, record, seq, hw, None, 0, engines.get(root.engine))
        for root, (record, seq, hw) in started.items()
        if root not in ended
    ]
    metas.sort(key=lambda m: m.execution_id)
    return OpenStream(newest, process, tuple(metas), lowest > 2)


def _newest(reader: EvidenceReader, listing: StreamListing, tries: int) -> MetaSegment | None:
    for seq in list(reversed(listing.meta_sequences))[:tries]:
        segment = _meta_or_none(reader, listing.euid, seq)
        if segment is not None:
            return segment
    return None


def _meta_or_none(reader: EvidenceReader, euid_hex: str, seq: int) -> MetaSegment | None:
    """A meta object; missing or corrupt it is a gap (None)."""
    try:
        return reader.meta(euid_hex, seq)
    except (EvidenceMissing, EvidenceCorrupt):
        return None


def _evidence_time_ns(first: MetaSegment | None, newest: MetaSegment | None) -> int | None:
    if first is None or not first.records or not isinstance(first.records[0], StreamStarted):
        return None
    offsets = [0]
    for segment in (first, newest):
        for record in () if segment is None else segment.records:
            if isinstance(record, RootStarted):
                offsets.append(record.started_ns)
            elif isinstance(record, RootEnded):
                offsets.append(record.ended_ns)
    return first.records[0].zero_unix_ns + max(offsets)


# --- undoing a sweep ----------------------------------------------------------------------------


def reopen(
    scope: Scope,
    root_ids: Iterable[str],
    control: ControlClient,
    private_store: PrivateStore,
    *,
    catalog_version: str = "v1",
) -> tuple[str, ...]:
    """Undo the sweep of ``root_ids`` whose ``RootEnded`` arrived after all: erase their public
    facts in the active generation, then their private rows and ``projected_v1`` markers.
    Replaying their meta objects then projects them as ended. Idempotent (run
    it again after a failure); returns the root ids the control plane erased."""
    ids = sorted(set(root_ids))
    if not ids:
        return ()
    generation = control.active_generation(scope, catalog_version)
    ack = control.erase_roots(scope, generation, ids, f"sweep-reopen-{new_request_id()}")
    private_store.delete_executions(ids)
    return ack.root_ids


class _NoQueue:
    """The sweep calls the worker's ``_ensure_values`` and ``_send``, which use no queue."""

    def _refuse(self) -> RuntimeError:
        return RuntimeError("the sweep has no projection queue")

    def send(self, body: str, *, delay_s: int = 0) -> str:
        raise self._refuse()

    def receive(
        self, max_messages: int = 10, wait_s: float = 0, visibility_timeout_s: int | None = None
    ) -> list[Message]:
        raise self._refuse()

    def delete(self, receipt: str) -> None:
        raise self._refuse()

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        raise self._refuse()

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        raise self._refuse()

    def dead_letter_queue(self) -> Queue:
        raise self._refuse()

    def approximate_count(self) -> int:
        raise self._refuse()


__all__ = [
    "OpenStream",
    "StreamListing",
    "SweepReport",
    "discover_scopes",
    "last_activity_s",
    "list_streams",
    "open_executions",
    "reopen",
    "sweep",
]
