"""The replay tool: enqueue what the projection queue should have delivered (architecture,
"Replay tool"; system contract, "Failure handling").

An operator command, not a service. For one scope it lists the meta objects and value packs
under ``evidence/v1/<tenant>/<project>/<environment>/streams/`` and plans a synthetic S3
notification (:func:`messages.synthetic_notification`, the shape S3 sends) for every object
whose work is missing:

* a **meta object** is missing when one of its ``RootEnded`` root ids is not projected: not
  in ClickHouse at the active generation (``threads_v1`` via a resident query) *or* not in
  Lance ``projected_v1`` — absent from either counts (:func:`projected_state`);
* a **pack** is missing when one of its CIDs is not in ``values_v1``.

Packs are enqueued before meta objects (values first, so executions do not wait as
``pending``), meta objects in (stream, sequence) order. An object that fails verification is
listed as corrupt and not enqueued (the worker would only quarantine it again); a vanished one
(erased between list and read) is skipped. Rebuilds enqueue everything regardless of state
(:func:`plan_rebuild`): after ``admin generation bump`` (ClickHouse rebuilt into a new
generation) or after the scope's Lance datasets are gone (:func:`delete_private_datasets`).
:func:`replay_dead_letters` moves the dead-letter queue back to the main queue after a fix.

Errors: bucket, Lance and control-plane failures propagate as the projector's errors
(:mod:`.errors`; ``transient`` says whether a rerun may succeed)::

    ProjectorError
    └── ReplayError      the replay cannot do what was asked (a Lance root it cannot delete)
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from baml_studio.format.ids import value_cid_wire
from baml_studio.format.records import RootEnded
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.objectstore.errors import ObjectNotFound, ObjectStoreError
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import (
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceOutOfScope,
    EvidenceUnavailable,
    ProjectorError,
)
from baml_studio.projector.evidence import DEFAULT_MAX_OBJECT_BYTES, EvidenceReader
from baml_studio.projector.lance_store import DATASETS, PROJECTED, PrivateStore
from baml_studio.projector.messages import MalformedKey, parse_evidence_key, synthetic_notification
from baml_studio.projector.resident_client import projected_root_ids
from baml_studio.publisher.errors import PackError
from baml_studio.publisher.pack import decode_pack
from baml_studio.queue.port import Queue, QueueSender

ReplayKind = Literal["meta", "pack"]
DEAD_LETTER_BATCH = 10


class ReplayError(ProjectorError):
    """The replay cannot do what was asked; the message says what to do instead."""

    transient = False


@dataclass(frozen=True, slots=True)
class ReplayObject:
    """One meta object or pack to notify again."""

    key: str
    kind: ReplayKind
    size: int
    etag: str
    version_id: str | None
    stream: str
    sequence: int = 0
    """The meta sequence (0 for a pack)."""
    flush_id: str = ""
    """The pack's flush ULID (``""`` for a meta object)."""
    missing: tuple[str, ...] = ()
    """Why: the root ids not projected (meta) or the CIDs not ingested (pack); empty in a
    rebuild."""


@dataclass(frozen=True, slots=True)
class CorruptObject:
    """A listed object that fails verification (or whose key is not an evidence key)."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    scope: Scope
    bucket: str
    packs: tuple[ReplayObject, ...]
    """Packs to enqueue, by (stream, flush id)."""
    metas: tuple[ReplayObject, ...]
    """Meta objects to enqueue, by (stream, sequence)."""
    listed: dict[str, int] = field(default_factory=dict)
    """Objects listed per kind (``meta``, ``pack``)."""
    corrupt: tuple[CorruptObject, ...] = ()
    vanished: int = 0
    """Objects listed but gone when read (erased meanwhile)."""
    rebuild: bool = False
    """Everything was planned regardless of state."""

    @property
    def objects(self) -> tuple[ReplayObject, ...]:
        """Everything to enqueue, in order: packs, then meta objects."""
        return self.packs + self.metas

    def summary(self) -> dict[str, Any]:
        return {
            "scope": "/".join((self.scope.tenant, self.scope.project, self.scope.environment)),
            "rebuild": self.rebuild,
            "listed": {"pack": self.listed.get("pack", 0), "meta": self.listed.get("meta", 0)},
            "missing": {"pack": len(self.packs), "meta": len(self.metas)},
            "missing_roots": sum(len(m.missing) for m in self.metas),
            "missing_values": len({c for p in self.packs for c in p.missing}),
            "corrupt": [{"key": c.key, "reason": c.reason} for c in self.corrupt],
            "vanished": self.vanished,
        }


@dataclass(frozen=True, slots=True)
class ProjectedState:
    """What is projected for one scope, by root id (= execution id)."""

    generation: str
    """The active ClickHouse generation read."""
    clickhouse: frozenset[str]
    """Root ids with ``threads_v1`` facts at ``generation``."""
    lance: frozenset[str]
    """Root ids with a ``projected_v1`` marker (newest version)."""

    @property
    def both(self) -> frozenset[str]:
        """Projected in both stores; anything else must be projected again."""
        return self.clickhouse & self.lance


def projected_state(
    control: ControlClient, private: PrivateStore, scope: Scope, *, catalog_version: str = "v1"
) -> ProjectedState:
    """The projected root ids of ``scope`` in ClickHouse (active generation) and in Lance."""
    facts = projected_root_ids(control, scope, catalog_version=catalog_version)
    version = private.version().get(PROJECTED, 0)
    lance = frozenset(private.projected_at(version))
    return ProjectedState(facts.generation, facts.root_ids, lance)


def plan_replay(
    store: ObjectStore,
    scope: Scope,
    *,
    projected_roots: Set[str],
    ingested_cids: Callable[[set[str]], set[str]],
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
) -> ReplayPlan:
    """Plan the objects of ``scope`` whose work is missing.

    ``projected_roots``: root ids projected everywhere (:attr:`ProjectedState.both`).
    ``ingested_cids(cids) -> missing``: of the wire CIDs (``bamlv_1_<hex>``) given, those not
    in ``values_v1`` (:meth:`PrivateStore.missing_values`). Bucket failures raise
    ``EvidenceUnavailable``; a corrupt object is listed in :attr:`ReplayPlan.corrupt`.
    """
    reader = EvidenceReader(store, scope, max_object_bytes=max_object_bytes)
    listed, corrupt = _list(store, scope)
    bad: list[CorruptObject] = list(corrupt)
    vanished = 0
    pack_cids: list[tuple[ReplayObject, list[str]]] = []
    metas: list[ReplayObject] = []
    for obj in listed:
        try:
            if obj.kind == "pack":
                pack_cids.append((obj, _pack_cids(store, obj, max_object_bytes)))
            else:
                missing = [r for r in _ended_roots(reader, obj) if r not in projected_roots]
                if missing:
                    metas.append(_with_missing(obj, missing))
        except EvidenceMissing:
            vanished += 1
        except (EvidenceCorrupt, EvidenceOutOfScope) as exc:
            bad.append(CorruptObject(obj.key, str(exc)))
    wanted = {cid for _, cids in pack_cids for cid in cids}
    absent = ingested_cids(wanted) if wanted else set()
    packs = [
        _with_missing(obj, [c for c in cids if c in absent])
        for obj, cids in pack_cids
        if any(c in absent for c in cids)
    ]
    return ReplayPlan(
        scope, store.bucket, tuple(packs), tuple(metas), _counts(listed), tuple(bad), vanished
    )


def plan_rebuild(store: ObjectStore, scope: Scope) -> ReplayPlan:
    """Every meta object and pack of ``scope``, regardless of state (nothing is read)."""
    listed, corrupt = _list(store, scope)
    packs = tuple(o for o in listed if o.kind == "pack")
    metas = tuple(o for o in listed if o.kind == "meta")
    return ReplayPlan(scope, store.bucket, packs, metas, _counts(listed), corrupt, 0, rebuild=True)


def replay(plan: ReplayPlan, queue: QueueSender) -> int:
    """Enqueue one synthetic S3 notification per planned object, packs before meta objects;
    the number sent."""
    sent = 0
    for obj in plan.objects:
        body = synthetic_notification(plan.bucket, obj.key, obj.size, obj.etag, obj.version_id)
        queue.send(body)
        sent += 1
    return sent


def replay_dead_letters(queue: Queue, *, wait_s: float = 0) -> int:
    """Move every message of ``queue``'s dead-letter queue back to ``queue`` (the same body,
    sent before the dead letter is deleted: a crash in between duplicates, never loses, and
    the projector is idempotent); the number moved. ``wait_s`` long-polls each receive
    (SQS short polls may miss messages)."""
    dead = queue.dead_letter_queue()
    moved = 0
    while messages := dead.receive(max_messages=DEAD_LETTER_BATCH, wait_s=wait_s):
        for message in messages:
            queue.send(message.body)
            dead.delete(message.receipt)
            moved += 1
    return moved


def delete_private_datasets(root_uri: str, store: ObjectStore | None = None) -> tuple[str, ...]:
    """Delete one scope's Lance datasets (the :class:`PrivateStore` root ``root_uri``): a local
    directory, or ``s3://<bucket>/<prefix>`` in ``store``'s bucket. Returns the names of the
    datasets that existed. Stop the scope's projector first: a write racing the delete may
    leave part of a dataset behind (the rebuild's replay then repairs it: writes are
    idempotent)."""
    if root_uri.startswith("s3://"):
        return _delete_bucket_prefix(root_uri, store)
    if "://" in root_uri and not root_uri.startswith("file://"):
        raise ReplayError(
            f"cannot delete Lance root {root_uri!r}: only a local directory or s3://BUCKET/PREFIX "
            "in the data plane's bucket; delete it with your storage tools, then replay --all"
        )
    existing = tuple(sorted(PrivateStore(root_uri).version()))
    path = Path(root_uri.removeprefix("file://"))
    if path.exists():
        try:
            shutil.rmtree(path)
        except OSError as exc:
            raise ReplayError(f"cannot delete Lance root {path}: {exc}") from exc
    return existing


def _delete_bucket_prefix(root_uri: str, store: ObjectStore | None) -> tuple[str, ...]:
    bucket, _, prefix = root_uri.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    if store is None or store.bucket != bucket or not prefix:
        raise ReplayError(
            f"cannot delete Lance root {root_uri!r}: it is not a prefix of the data plane's "
            "bucket; delete it with your storage tools, then replay --all"
        )
    names: set[str] = set()
    for info in list(_listing(store, prefix + "/")):
        names.add(info.key[len(prefix) + 1 :].split("/", 1)[0])
        try:
            store.delete(info.key)
        except ObjectStoreError as exc:
            raise EvidenceUnavailable(f"cannot delete {info.key}: {exc}") from exc
    return tuple(sorted(n for n in names if n in DATASETS))


# --- internals -------------------------------------------------------------------------------


def _list(store: ObjectStore, scope: Scope) -> tuple[list[ReplayObject], tuple[CorruptObject, ...]]:
    """The meta objects and packs under the scope's ``streams/``, packs then metas, each in
    (stream, sequence or flush id) order; keys outside the grammar as corrupt."""
    prefix = evidence_prefix(scope) + "streams/"
    objects: list[ReplayObject] = []
    corrupt: list[CorruptObject] = []
    for info in _listing(store, prefix):
        try:
            key = parse_evidence_key(info.key)
        except MalformedKey as exc:
            corrupt.append(CorruptObject(info.key, str(exc)))
            continue
        if key.kind in ("meta", "pack") and key.scope == scope and key.euid is not None:
            kind: ReplayKind = "meta" if key.kind == "meta" else "pack"
            objects.append(
                ReplayObject(
                    info.key,
                    kind,
                    info.size,
                    info.etag,
                    info.version_id,
                    key.euid,
                    key.sequence or 0,
                    key.flush_id or "",
                )
            )
    objects.sort(key=lambda o: (o.kind != "pack", o.stream, o.sequence, o.flush_id))
    return objects, tuple(corrupt)


def _listing(store: ObjectStore, prefix: str) -> Iterator[ObjectInfo]:
    try:
        yield from store.list(prefix)
    except ObjectStoreError as exc:
        raise EvidenceUnavailable(f"cannot list {prefix}: {exc}") from exc


def _ended_roots(reader: EvidenceReader, obj: ReplayObject) -> list[str]:
    """Root ids of the stream's RootEnded records in meta object ``obj`` (as the worker's
    gather selects them)."""
    segment = reader.meta(obj.stream, obj.sequence)
    euid = bytes.fromhex(obj.stream)
    roots = [r.root for r in segment.records if isinstance(r, RootEnded) and r.root.euid == euid]
    return list(dict.fromkeys(root.wire() for root in roots))


def _pack_cids(store: ObjectStore, obj: ReplayObject, max_bytes: int) -> list[str]:
    if obj.size > max_bytes:
        raise EvidenceCorrupt(f"{obj.key} is {obj.size} bytes; the limit is {max_bytes}")
    try:
        data = store.get(obj.key)
    except ObjectNotFound as exc:
        raise EvidenceMissing(f"no pack {obj.key}", key=obj.key) from exc
    except ObjectStoreError as exc:
        raise EvidenceUnavailable(f"cannot read {obj.key}: {exc}", key=obj.key) from exc
    try:
        pack = decode_pack(data, max_bytes)
    except PackError as exc:
        raise EvidenceCorrupt(f"{obj.key} is a malformed pack: {exc}", key=obj.key) from exc
    return [value_cid_wire(entry.cid) for entry in pack.entries]


def _with_missing(obj: ReplayObject, missing: list[str]) -> ReplayObject:
    return replace(obj, missing=tuple(missing))


def _counts(objects: list[ReplayObject]) -> dict[str, int]:
    return {
        "pack": sum(1 for o in objects if o.kind == "pack"),
        "meta": sum(1 for o in objects if o.kind == "meta"),
    }


__all__ = [
    "CorruptObject",
    "ProjectedState",
    "ReplayError",
    "ReplayObject",
    "ReplayPlan",
    "delete_private_datasets",
    "plan_rebuild",
    "plan_replay",
    "projected_state",
    "replay",
    "replay_dead_letters",
]
