"""What each stream object of a scope references, read from the bucket (the reference count's
source) and remembered in a small index.

Per object kind (system contract, "Object kinds")::

    meta segment   function-table CIDs (EngineStarted.function_table_cid) and root ids
                   (RootStarted/RootEnded whose root belongs to the stream)
    data segment   value CIDs its facts hold as available (projector.gather.referenced_values)
    value pack     the CIDs it carries

:class:`RefReader` reads and verifies each object with the projector's
:class:`~baml_studio.projector.evidence.EvidenceReader` (packs with the publisher's decoder).
An object that fails verification, or that vanished between the listing and the read, has no
references it can vouch for: ``refs`` returns ``None`` and counts it (``corrupt``,
``vanished``). A bucket that does not answer raises ``EvidenceUnavailable`` (transient).

:class:`RefIndex` is the cheaper index of docs/erasure.md: evidence objects are create-only and
immutable, so the references of ``(key, etag)`` never change and can be kept. With it a
reference count reads only the objects it has not read before. The index is a cache: losing
``refs.sqlite`` costs one full read, never a wrong answer.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import EngineStarted, RootEnded, RootStarted
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.objectstore.errors import ObjectNotFound, ObjectStoreError
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.projector.errors import EvidenceCorrupt, EvidenceMissing, EvidenceUnavailable
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import referenced_values
from baml_studio.projector.messages import MalformedKey, parse_evidence_key
from baml_studio.publisher.errors import PackError
from baml_studio.publisher.pack import Pack, decode_pack

ObjectKind = Literal["meta", "data", "pack"]
log = logging.getLogger(__name__)

CID_BYTES = 32
_KINDS: dict[str, ObjectKind] = {"meta": "meta", "data": "data", "pack": "pack"}


@dataclass(frozen=True, slots=True)
class StreamObject:
    """One object under a scope's ``streams/``."""

    key: str
    kind: ObjectKind
    euid: str
    sequence: int
    """The segment sequence (0 for a pack)."""
    etag: str
    size: int


@dataclass(frozen=True, slots=True)
class ObjectRefs:
    cids: frozenset[bytes]
    """Function tables (meta), values referenced (data) or values carried (pack)."""
    roots: tuple[str, ...] = ()
    """Root ids (meta only)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """The objects under a scope's ``streams/``, by stream."""

    streams: dict[str, list[StreamObject]]
    other: tuple[str, ...] = ()
    """Keys under ``streams/`` outside the evidence grammar (erased with their stream)."""


def list_streams(store: ObjectStore, scope: Scope) -> Listing:
    """One listing of ``evidence/v1/<scope>/streams/``."""
    prefix = evidence_prefix(scope) + "streams/"
    streams: dict[str, list[StreamObject]] = {}
    other: list[str] = []
    for info in _listing(store, prefix):
        try:
            key = parse_evidence_key(info.key)
        except MalformedKey:
            other.append(info.key)
            continue
        if key.euid is None or key.kind not in ("meta", "data", "pack"):
            other.append(info.key)
            continue
        kind: ObjectKind = _KINDS[key.kind]
        streams.setdefault(key.euid, []).append(
            StreamObject(info.key, kind, key.euid, key.sequence or 0, info.etag, info.size)
        )
    return Listing(streams, tuple(other))


def list_keys(store: ObjectStore, prefix: str) -> list[str]:
    """Every key under ``prefix`` (``EvidenceUnavailable`` when the bucket fails)."""
    return [info.key for info in _listing(store, prefix)]


def _listing(store: ObjectStore, prefix: str) -> Iterator[ObjectInfo]:
    try:
        yield from store.list(prefix)
    except ObjectStoreError as exc:
        raise EvidenceUnavailable(f"cannot list {prefix}: {exc}") from exc


def _refs(blob: object, roots_json: object) -> ObjectRefs:
    """A stored row's references; ``ValueError`` or ``TypeError`` for a damaged one."""
    if not isinstance(blob, bytes) or len(blob) % CID_BYTES or not isinstance(roots_json, str):
        raise TypeError("not a row this index writes")
    roots = json.loads(roots_json)
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise TypeError("roots is not a list of text")
    cids = frozenset(blob[i : i + CID_BYTES] for i in range(0, len(blob), CID_BYTES))
    return ObjectRefs(cids, tuple(roots))


class RefIndex:
    """``(key, etag) -> ObjectRefs`` in SQLite at ``path`` (``None``: in memory only). A cache:
    a row it cannot read is a miss (the object is read again and the row replaced)."""

    def __init__(self, path: Path | None = None) -> None:
        self._lock = threading.Lock()
        target = ":memory:"
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            target = str(path)
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS object_refs (key TEXT PRIMARY KEY, etag TEXT NOT NULL, "
            "cids BLOB NOT NULL, roots TEXT NOT NULL)"
        )

    def get(self, key: str, etag: str) -> ObjectRefs | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT cids, roots FROM object_refs WHERE key = ? AND etag = ?", (key, etag)
            ).fetchone()
        if row is None:
            return None
        try:
            return _refs(row[0], row[1])
        except (ValueError, TypeError, RecursionError):
            log.warning("reference index: the row of %s cannot be read; reading the object", key)
            return None  # a miss: the caller reads the object again and put() replaces the row

    def put(self, key: str, etag: str, refs: ObjectRefs) -> None:
        blob = b"".join(sorted(refs.cids))
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO object_refs (key, etag, cids, roots) VALUES (?, ?, ?, ?)",
                (key, etag, blob, json.dumps(list(refs.roots))),
            )

    def forget(self, keys: list[str]) -> None:
        with self._lock:
            self._conn.executemany("DELETE FROM object_refs WHERE key = ?", [(k,) for k in keys])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass
class ReadCounts:
    read: int = 0
    cached: int = 0
    corrupt: list[str] = field(default_factory=list)
    vanished: int = 0


class RefReader:
    """Reads the references of one scope's stream objects (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        scope: Scope,
        index: RefIndex | None = None,
        *,
        max_object_bytes: int,
    ) -> None:
        self._store = store
        self._reader = EvidenceReader(store, scope, max_object_bytes=max_object_bytes)
        self._index = index if index is not None else RefIndex()
        self._owns_index = index is None
        self._max = max_object_bytes
        self.counts = ReadCounts()

    def refs(self, obj: StreamObject) -> ObjectRefs | None:
        """The object's references, or ``None`` when it is corrupt or gone."""
        cached = self._index.get(obj.key, obj.etag)
        if cached is not None:
            self.counts.cached += 1
            return cached
        try:
            refs = self._read(obj)
        except EvidenceMissing:
            self.counts.vanished += 1
            return None
        except EvidenceCorrupt as exc:
            self.counts.corrupt.append(f"{obj.key}: {exc}")
            return None
        self.counts.read += 1
        self._index.put(obj.key, obj.etag, refs)
        return refs

    def close(self) -> None:
        if self._owns_index:
            self._index.close()

    def _read(self, obj: StreamObject) -> ObjectRefs:
        if obj.kind == "meta":
            segment = self._reader.meta(obj.euid, obj.sequence)
            euid = bytes.fromhex(obj.euid)
            tables = {
                r.function_table_cid
                for r in segment.records
                if isinstance(r, EngineStarted) and r.function_table_cid is not None
            }
            roots = [
                r.root
                for r in segment.records
                if isinstance(r, RootStarted | RootEnded) and r.root.euid == euid
            ]
            return ObjectRefs(frozenset(tables), _wire_ids(roots))
        if obj.kind == "data":
            data = self._reader.data(obj.euid, obj.sequence)
            return ObjectRefs(referenced_values(data.groups))
        return ObjectRefs(frozenset(entry.cid for entry in self.pack(obj.key).entries))

    def pack(self, key: str) -> Pack:
        """The decoded pack under ``key`` (``EvidenceMissing``/``EvidenceCorrupt``/
        ``EvidenceUnavailable`` as for segments)."""
        try:
            body = self._store.get(key)
        except ObjectNotFound as exc:
            raise EvidenceMissing(f"no pack {key}", key=key) from exc
        except ObjectStoreError as exc:
            raise EvidenceUnavailable(f"cannot read {key}: {exc}", key=key) from exc
        if len(body) > self._max:
            raise EvidenceCorrupt(f"{key} is {len(body)} bytes; the limit is {self._max}", key=key)
        try:
            return decode_pack(body, self._max)
        except PackError as exc:
            raise EvidenceCorrupt(f"{key} is a malformed pack: {exc}", key=key) from exc


def _wire_ids(roots: list[ThreadRef]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(root.wire() for root in roots))
