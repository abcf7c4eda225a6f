"""One projection-queue message at a time: dispatch by key suffix, verify, project, write, delete.

Per message (system contract, "Projector progress for one queue message")::

    received -> verified -> facts visible -> Lance version committed -> message deleted
                        \\-> pending (message left for a retry)
                        \\-> quarantined (dead-letter queue + quarantine marker)

* ``.bamlpack.zst``: decompress, verify every entry (publisher/pack.py) and ingest the values
  into ``values_v1`` (duplicates collapse by CID). No public fact leaves the data plane.
* ``.bamlmeta.zst``: gather every RootEnded execution of the object (evidence by key), make sure
  every value it references is in ``values_v1`` (else ingest it from ``cas/values/``, else the
  message stays: ``pending``), project it (pure), send its public batches to the control plane
  (each answers once visible), write its private rows to Lance with the ``projected_v1`` marker
  last, and only then delete the message.

Verification failures (a key outside its scope's evidence prefix, a bad checksum, a malformed
object despite a valid checksum, an unsupported version) quarantine the message at once: it goes
to the dead-letter queue and ``<scope prefix>/quarantine/<rest of key>.quarantine`` records why;
the object's bytes stay. Transient failures (bucket, control plane, Lance) leave the message for
redelivery after a backoff; after ``maxReceiveCount`` the queue dead-letters it.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from baml_studio.catalog.fold_inputs import ExecutionInputs
from baml_studio.catalog.schema import FUNCTION_DEFINITIONS
from baml_studio.format.errors import BamlStudioError
from baml_studio.format.ids import value_cid_wire
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.objectstore.errors import ObjectAlreadyExists, ObjectNotFound
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import (
    ControlPlaneAuthRefused,
    ControlPlaneNotFound,
    ControlPlaneRefused,
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceOutOfScope,
    InactiveGeneration,
    ProjectorError,
    ValuesPending,
)
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import gather_root_ended
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.messages import (
    EvidenceKey,
    MalformedKey,
    MalformedMessage,
    ObjectEvent,
    parse_evidence_key,
    parse_notification,
)
from baml_studio.projector.project import Projection, project_executions
from baml_studio.publisher.errors import PackError
from baml_studio.publisher.pack import decode_pack
from baml_studio.queue.errors import ReceiptInvalid
from baml_studio.queue.port import Message, Queue

DEFINITIONS = FUNCTION_DEFINITIONS.name

log = logging.getLogger(__name__)

Outcome = Literal["deleted", "retry", "quarantined"]
MAX_PACK_BYTES = 256 * 1024 * 1024
QUARANTINE_SUFFIX = ".quarantine"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    catalog_version: str = "v1"
    """Catalog version the projector folds and registers with the control plane."""

    retry_backoff_s: tuple[int, ...] = (5, 15, 30, 60, 120, 300, 600)
    """Visibility timeout before the n-th redelivery of a message left for a retry."""

    pending_backoff_s: tuple[int, ...] = (1, 2, 4, 8, 15)
    """For a message left pending on values not ingested yet (their pack is usually a
    notification or two behind): the first redeliveries come this soon, each no later than
    :attr:`retry_backoff_s` would have it; past this list, :attr:`retry_backoff_s`. A pending
    meta object at the end of a burst used to wait 5 s for a pack that landed in 1."""

    partition_rows: int = 50_000
    """Rows per public batch."""

    slice_executions: int = 256
    """Executions of one meta object projected, sent and committed together. A meta object
    can hold thousands; in slices, its first executions are queryable while the rest are
    folded, and two workers' folding and sending interleave instead of both folding at once
    while the control plane waits. Each slice is one Lance commit per dataset."""

    slices_in_flight: int = 2
    """Slices of one meta object whose batches are in flight at once while the worker folds
    the next; each lands (private rows, then markers) once its batches are visible, oldest
    first. 2 against 1 in the 100,000-call arrival replay: 87.2 and 94.6 s against 89.7 and
    100.5 s (alternating pairs; a few per cent, near the noise: the control plane's writes,
    not the supply of batches, bound it)."""

    batch_concurrency: int = 512
    """Public batches of one slice in flight at once. The control plane coalesces the
    batches that wait at the same time into one lookup and one insert per relation, so many
    in flight is what makes ingest fast; the client sends them on one asyncio thread. 512
    against 256: control-plane CPU 9.9 and 11.8 s against 13.7 and 15.1 s for the same
    1,000 executions (``benchmarks/projection.py --executions 1000 --runs drain:1``)."""

    def __post_init__(self) -> None:
        for name in ("slice_executions", "slices_in_flight", "batch_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.retry_backoff_s:
            raise ValueError("retry_backoff_s needs at least one delay")

    def retry_delay_s(self, receive_count: int, *, pending: bool = False) -> int:
        """Seconds before the redelivery of a message received ``receive_count`` times."""
        n = max(receive_count, 1) - 1
        backoff = self.retry_backoff_s
        delay = backoff[min(n, len(backoff) - 1)]
        if pending and n < len(self.pending_backoff_s):
            delay = min(delay, self.pending_backoff_s[n])
        return delay


@dataclass
class WorkerStats:
    messages: int = 0
    deleted: int = 0
    retried: int = 0
    quarantined: int = 0
    executions: int = 0
    packs: int = 0
    values: int = 0
    pending: int = 0
    late_root_ended: int = 0


class Quarantine(ProjectorError):
    """Internal: the message must go to the dead-letter queue with a marker."""

    transient = False

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}", key=key)
        self.reason = reason


class ProjectorWorker:
    def __init__(
        self,
        *,
        store: ObjectStore,
        queue: Queue,
        control: ControlClient,
        private_store: Callable[[Scope], PrivateStore],
        config: WorkerConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.queue = queue
        self.control = control
        self.private_store = private_store
        self.config = config or WorkerConfig()
        self.clock = clock
        self.stats = WorkerStats()

    # -- the loop -------------------------------------------------------------------

    def run_once(self, *, max_messages: int = 10, wait_s: float = 0) -> int:
        """Receive and handle one batch of messages; the number handled."""
        messages = self.queue.receive(max_messages=max_messages, wait_s=wait_s)
        for message in messages:
            self.handle(message)
        return len(messages)

    def drain(self, *, max_rounds: int = 1000) -> int:
        """Handle messages until the queue has none visible (tests, replay)."""
        handled = 0
        for _ in range(max_rounds):
            count = self.run_once()
            if count == 0:
                break
            handled += count
        return handled

    def handle(self, message: Message) -> Outcome:
        self.stats.messages += 1
        try:
            self.process(message.body)
        except Quarantine as exc:
            self._quarantine(message, exc)
            return "quarantined"
        except ValuesPending as exc:
            self.stats.pending += 1
            log.info("message %s pending: %s", message.id, exc)
            return self._retry(message, pending=True)
        except (ControlPlaneAuthRefused, ControlPlaneNotFound) as exc:  # not the message
            log.error(
                "message %s retried: the control plane refused this projector's token, scope "
                "or URL: %s",
                message.id,
                exc,
            )
            return self._retry(message)
        except ProjectorError as exc:
            if exc.transient:
                log.warning("message %s retried: %s", message.id, type(exc).__name__)
                return self._retry(message)
            self._quarantine(message, Quarantine("(message)", f"{type(exc).__name__}: {exc}"))
            return "quarantined"
        except BamlStudioError as exc:
            if getattr(exc, "transient", False):
                log.warning("message %s retried: %s", message.id, type(exc).__name__)
                return self._retry(message)
            self._quarantine(message, Quarantine("(message)", f"{type(exc).__name__}: {exc}"))
            return "quarantined"
        try:
            self.queue.delete(message.receipt)
        except ReceiptInvalid:
            # the lease ran out while projecting: the message was redelivered and its new
            # holder repeats the same ids; nothing is lost or doubled
            log.warning("message %s outlived its lease; its redelivery finishes it", message.id)
            return "retry"
        self.stats.deleted += 1
        return "deleted"

    def _retry(self, message: Message, *, pending: bool = False) -> Outcome:
        self.queue.change_visibility(message.receipt, self.config.retry_delay_s(
            message.receive_count, pending=pending
        ))  # fmt: skip
        self.stats.retried += 1
        return "retry"

    def _quarantine(self, message: Message, exc: Quarantine) -> None:
        log.warning("message %s quarantined: %s", message.id, exc.reason)
        self._write_marker(exc)
        self.queue.send_to_dead_letter(message, exc.reason[:1000])
        self.stats.quarantined += 1

    def _write_marker(self, exc: Quarantine) -> None:
        try:
            evidence = parse_evidence_key(exc.key)
        except MalformedKey:
            return
        prefix = evidence_prefix(evidence.scope)
        rest = exc.key[len(prefix) :]
        marker_key = f"{prefix}quarantine/{rest}{QUARANTINE_SUFFIX}"
        body = json.dumps(
            {"key": exc.key, "reason": exc.reason, "quarantined_at": int(self.clock())},
            sort_keys=True,
        ).encode("utf-8")
        with contextlib.suppress(ObjectAlreadyExists):  # a redelivered message, marked before
            self.store.put_if_absent(marker_key, body, hashlib.sha256(body).hexdigest())

    # -- one message ----------------------------------------------------------------

    def process(self, body: str) -> None:
        try:
            events = parse_notification(body)
        except MalformedMessage as exc:
            raise Quarantine("(message)", f"malformed notification: {exc}") from exc
        for event in events:
            self.process_event(event)

    def process_event(self, event: ObjectEvent) -> None:
        if event.bucket != self.store.bucket:
            raise Quarantine(event.key, f"notification for another bucket {event.bucket!r}")
        try:
            key = parse_evidence_key(event.key)
        except MalformedKey as exc:
            raise Quarantine(event.key, f"not an evidence key: {exc}") from exc
        if key.kind == "pack":
            self.ingest_pack(event, key)
        elif key.kind == "meta":
            self.project_meta(event, key)
        else:
            log.info("ignoring a notification for %s (%s)", event.key, key.kind)

    def ingest_pack(self, event: ObjectEvent, key: EvidenceKey) -> None:
        try:
            data = self.store.get(event.key)
        except ObjectNotFound:
            log.info("pack %s is gone (erased?); nothing to ingest", event.key)
            return
        try:
            pack = decode_pack(data, MAX_PACK_BYTES)
        except PackError as exc:
            raise Quarantine(event.key, f"malformed pack: {exc}") from exc
        entries = [
            (value_cid_wire(e.cid), e.codec, e.body, f"{event.key}#{i}")
            for i, e in enumerate(pack.entries)
        ]  # decode_pack verified every entry's CID against its codec and body
        added = self.private_store(key.scope).ingest_values(entries, verified=True)
        self.stats.packs += 1
        self.stats.values += added
        log.info("pack %s: %d values, %d of them new", event.key, len(entries), added)

    def project_meta(self, event: ObjectEvent, key: EvidenceKey) -> None:
        if key.euid is None or key.sequence is None:
            raise Quarantine(event.key, "a meta key without stream or sequence")
        reader = EvidenceReader(self.store, key.scope)
        try:
            gathered = gather_root_ended(reader, key.euid, key.sequence)
        except EvidenceMissing:
            log.info("meta object %s is gone (erased?); nothing to project", event.key)
            return
        except (EvidenceCorrupt, EvidenceOutOfScope) as exc:
            raise Quarantine(event.key, f"{type(exc).__name__}: {exc}") from exc
        if not gathered.executions:
            return
        private = self.private_store(key.scope)
        generation = self.control.active_generation(key.scope, self.config.catalog_version)
        step = self.config.slice_executions
        carried = gathered.carried_definitions()
        sending: collections.deque[_Sending] = collections.deque()  # slices in flight, oldest first
        began, projected, batches = time.monotonic(), self.stats.executions, 0
        try:
            for start in range(0, len(gathered.executions), step):
                projections = self._project_slice(
                    event, reader, private, gathered.executions[start : start + step], carried
                )
                batches += sum(len(p.public) for _, p in projections)
                while len(sending) >= self.config.slices_in_flight:
                    generation = self._land_slice(private, sending.popleft())
                sending.append(_Sending(self, key.scope, generation, private, projections))
            while sending:
                self._land_slice(private, sending.popleft())
        except BaseException:
            while sending:  # folding a slice failed: the ones in flight still land
                with contextlib.suppress(Exception):  # their own failures are logged; retried
                    self._land_slice(private, sending.popleft())
            raise
        log.info(
            "meta object %s: %d executions projected, %d batches sent, in %.1fs",
            event.key,
            self.stats.executions - projected,
            batches,
            time.monotonic() - began,
        )

    def _project_slice(
        self,
        event: ObjectEvent,
        reader: EvidenceReader,
        private: PrivateStore,
        executions: Sequence[ExecutionInputs],
        carried: Mapping[str, list[dict[str, Any]]],
    ) -> list[tuple[ExecutionInputs, Projection]]:
        """A slice of a meta object's executions folded, their values checked; each engine's
        definitions travel with the execution ``carried`` names
        (:meth:`Gathered.carried_definitions`). Runs while the previous slice's batches are
        in flight: the control plane writes one slice while this thread folds the next."""
        folded = project_executions(
            [(inputs, carried.get(inputs.meta.execution_id, [])) for inputs in executions],
            partition_rows=self.config.partition_rows,
        )
        projections = list(zip(executions, folded, strict=True))
        wanted = frozenset(cid for _, p in projections for cid in p.value_cids)
        self._ensure_cids(reader, private, wanted, f"meta object {event.key}")
        return projections

    def _land_slice(self, private: PrivateStore, sending: _Sending) -> str:
        """A slice's public batches visible, then its private rows (one commit per dataset,
        the markers last). Returns the generation the batches went to."""
        sent = sending.result()
        projections = sending.projections
        private.write_executions(
            [
                (
                    p.root_id,
                    p.root_id,
                    inputs.process.process_id,
                    [(rows.relation, rows.table) for rows in p.private],
                )
                for inputs, p in projections
                if p.root_id in sent.kept
            ],
            unmarked=[
                (p.root_id, [(r.relation, r.table) for r in p.private if r.relation == DEFINITIONS])
                for _, p in projections
                if p.root_id in sent.definitions_only
            ],
        )
        self.stats.executions += len(sent.kept)
        return sent.generation

    def _send_all(
        self, scope: Scope, generation: str, private: PrivateStore, projections: list[Projection]
    ) -> _Sent:
        """Every public batch of ``projections`` (visible on return); the root ids to write
        and the generation the batches went to (a newer one after a 409).
        An execution the sweep closed before this late RootEnded arrived is kept out: the
        control plane refuses its changed batches with 409 and its abandoned facts stay
        (``sweep.reopen`` and a replay re-project it); the other executions go on. The
        engine definitions a kept-out execution carries for the others are made visible
        alone (the same batch whatever the execution's end) and their private rows written
        without its marker."""
        everything = Projection(
            "", tuple(b for p in projections for b in p.public), (), frozenset()
        )
        try:
            return _Sent(
                {p.root_id for p in projections}, self._send(scope, generation, everything)
            )
        except ControlPlaneRefused as exc:
            if exc.code != "batch_digest_conflict":
                raise
        sent = _Sent(set(), generation)
        for projection in projections:  # find the late ones, one execution at a time
            try:
                sent.generation = self._send(scope, sent.generation, projection)
            except ControlPlaneRefused as exc:
                if exc.code != "batch_digest_conflict" or not private.projected(
                    {projection.root_id}
                ):
                    raise
                log.warning(
                    "execution %s was closed by the sweep; late RootEnded kept out",
                    projection.root_id,
                )
                self.stats.late_root_ended += 1
                carried = tuple(b for b in projection.public if b.relation == DEFINITIONS)
                if carried:
                    alone = Projection(projection.root_id, carried, (), frozenset())
                    sent.generation = self._send(scope, sent.generation, alone)
                    sent.definitions_only.add(projection.root_id)
                continue
            sent.kept.add(projection.root_id)
        return sent

    def _ensure_values(
        self, reader: EvidenceReader, private: PrivateStore, projection: Projection
    ) -> None:
        self._ensure_cids(reader, private, projection.value_cids, f"execution {projection.root_id}")

    def _ensure_cids(
        self, reader: EvidenceReader, private: PrivateStore, cids: frozenset[bytes], what: str
    ) -> None:
        """Every value in ``values_v1``: a missing one is read from ``cas/values/`` (large
        values) and ingested, else ``ValuesPending`` (the message waits for its pack)."""
        wanted = {value_cid_wire(cid) for cid in cids}
        missing = private.missing_values(wanted) if wanted else set()
        if not missing:
            return
        found = []
        for cid_text in sorted(missing):
            cid = bytes.fromhex(cid_text.removeprefix("bamlv_1_"))
            try:
                obj = reader.cas_value(cid)
            except EvidenceMissing:
                continue
            found.append((cid_text, obj.codec, obj.body, f"cas:{cid_text}"))
        if found:  # cas_value verified each object against the CID it was asked for
            private.ingest_values(found, verified=True)
        still = missing - {entry[0] for entry in found}
        if still:
            raise ValuesPending(f"{what}: {len(still)} values not ingested yet")

    def _send(self, scope: Scope, generation: str, projection: Projection) -> str:
        for _ in range(3):
            try:
                self.control.put_batches(
                    scope,
                    generation,
                    projection.public,
                    concurrency=self.config.batch_concurrency,
                )
                return generation
            except InactiveGeneration as exc:
                self.control.invalidate_generation(scope)
                generation = exc.active_generation or self.control.active_generation(
                    scope, self.config.catalog_version
                )
        raise InactiveGeneration(
            "the active generation kept changing while projecting", active_generation=None
        )


@dataclass
class _Sent:
    """What a slice's send made visible."""

    kept: set[str]
    """Root ids whose batches are all visible: their private rows and markers are written."""
    generation: str
    """The generation the batches went to."""
    definitions_only: set[str] = field(default_factory=set)
    """Kept-out root ids whose carried definitions alone are visible (rows, no marker)."""


class _Sending:
    """One slice's public batches on their own thread (:meth:`ProjectorWorker._send_all`),
    so the worker folds the next slice meanwhile; :meth:`result` waits and returns or
    raises what the send did."""

    def __init__(
        self,
        worker: ProjectorWorker,
        scope: Scope,
        generation: str,
        private: PrivateStore,
        projections: list[tuple[ExecutionInputs, Projection]],
    ) -> None:
        self.projections = projections
        self._outcome: _Sent | None = None
        self._error: BaseException | None = None
        sent = [p for _, p in projections]
        self._thread = threading.Thread(
            target=self._run,
            args=(worker, scope, generation, private, sent),
            name="projector-send",
            daemon=True,
        )
        self._thread.start()

    def _run(
        self,
        worker: ProjectorWorker,
        scope: Scope,
        generation: str,
        private: PrivateStore,
        sent: list[Projection],
    ) -> None:
        try:
            self._outcome = worker._send_all(scope, generation, private, sent)
        except BaseException as exc:  # re-raised by result() on the worker's thread
            self._error = exc

    def result(self) -> _Sent:
        """What the send made visible (:class:`_Sent`)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._outcome is None:
            raise RuntimeError("a slice's send ended without an outcome")
        return self._outcome
