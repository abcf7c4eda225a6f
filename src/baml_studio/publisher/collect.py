"""What one flush ships: pure selection over the local store plus zstd and SHA-256 per object.

Segments are listed before CAS files. The profiler writes a value before the data segment that
names it, so every value a collected segment references is either collected too or was shipped
earlier. Per stream and plane, sequences above the cursor are taken in order: a segment whose
header version is not supported is reported and skipped (the cursor passes it); a missing or
checksum-failing segment blocks the plane for ``corrupt_block_seconds`` from the first time it
is seen, then it is reported and skipped. CAS files not in the shipped ledger become: codec
2 → ``table``; codec 1 with a body at or above ``large_value_threshold_bytes`` → ``value``;
smaller codec-1 values → packs of at most ``pack_max_entry_bytes`` original bytes. Packs still
listed in the in-flight journal are rebuilt with the same flush id and members, so a retried
flush produces byte-identical packs and the gateway answers ``stored``.

No object larger than ``max_object_bytes`` compressed is ever planned. A pack over it is split
in halves (new flush ids); a single value or table over it is reported (``OVERSIZE``, skipped:
the rest ships, the file stays local and is reported again on every flush); a segment over it
is reported and blocks its plane (never passed by the cursor), on every flush until resolved.
"""

from __future__ import annotations

import enum
import hashlib
import os
import struct
from collections.abc import MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.format.cas import CAS_MAGIC, CODEC_FUNCTION_TABLE, CODEC_VALUE
from baml_studio.format.ids import value_cid_wire
from baml_studio.publisher.config import PublisherConfig
from baml_studio.publisher.pack import MAX_PACK_ENTRIES, compress, pack_body_verified
from baml_studio.publisher.state import Cursor, JournalPack, PublishState, new_ulid
from baml_studio.store.layout import Plane, StoreLayout, parse_cas_file_name, parse_stream_dir_name
from baml_studio.store.segments import plane_sequences

_CAS_HEAD = struct.Struct(">8sHHQ")
_SEGMENT_MAGIC = {Plane.META: b"BAMLMET1", Plane.DATA: b"BAMLDAT1"}


class Kind(enum.Enum):
    """The ``kind`` of an authorize entry."""

    META = "meta_segment"
    DATA = "data_segment"
    PACK = "value_pack"
    VALUE = "value"
    TABLE = "table"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One compressed object ready to authorize and PUT."""

    kind: Kind
    body: bytes
    sha256: str
    original_bytes: int
    sequence: int | None = None
    cid: bytes | None = None
    flush_id: str | None = None
    members: tuple[bytes, ...] = ()
    """Packs: the CIDs inside."""
    source: Path | None = None
    """The local file (segments, values and tables); packs: None."""

    def request_entry(self) -> dict[str, Any]:
        """This object as an ``UploadObject`` of openapi.yaml."""
        entry: dict[str, Any] = {
            "kind": self.kind.value, "size_bytes": len(self.body), "checksum_sha256": self.sha256,
        }  # fmt: skip
        if self.kind in (Kind.META, Kind.DATA):
            entry["sequence"] = self.sequence
        elif self.kind is Kind.PACK:
            entry["entry_count"] = len(self.members)
        elif self.cid is not None:
            entry["cid"] = value_cid_wire(self.cid)
            entry["codec"] = CODEC_VALUE if self.kind is Kind.VALUE else CODEC_FUNCTION_TABLE
        return entry


class ProblemCode(enum.Enum):
    """Why a file was not shipped."""

    MISSING = "missing"
    """A segment sequence below an existing one is absent."""
    WAITS_FOR_DATA = "waits_for_data"
    """A meta segment whose executions may need data segments that cannot ship yet."""
    UNREADABLE = "unreadable"
    CORRUPT = "corrupt"
    """Bad magic, length, name or checksum."""
    UNSUPPORTED = "unsupported"
    """A segment or CAS version (or CAS codec) the gateway does not accept."""
    OVERSIZE = "oversize"
    """Compressed larger than the config's ``max_object_bytes``."""
    REJECTED = "rejected"
    """The gateway refused the object with a terminal status (413 on authorize or PUT)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """A file (or pack) that was not shipped, and why."""

    path: Path
    reason: str
    skipped: bool
    """True: the cursor passes it or it does not hold a cursor (a value, table or pack), and
    the rest ships; False: it blocks its plane for now."""
    code: ProblemCode = ProblemCode.CORRUPT
    size_bytes: int | None = None
    """Compressed size, for ``OVERSIZE`` and ``REJECTED``."""
    error: Exception | None = None
    """``REJECTED``: the gateway's typed error (``GatewayRejected`` or ``UploadFailed``, 413)."""


@dataclass(slots=True)
class StreamBatch:
    euid: bytes
    cursor: Cursor
    meta: list[Outgoing] = field(default_factory=list)
    data: list[Outgoing] = field(default_factory=list)
    skipped: dict[Plane, set[int]] = field(
        default_factory=lambda: {Plane.META: set(), Plane.DATA: set()}
    )


@dataclass(slots=True)
class FlushPlan:
    flush_id: str
    carrier: bytes | None
    """The stream whose ``process_euid`` carries the CAS objects and packs."""
    cas: list[Outgoing] = field(default_factory=list)
    packs: list[Outgoing] = field(default_factory=list)
    streams: list[StreamBatch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def objects(self) -> int:
        return (
            len(self.cas) + len(self.packs) + sum(len(s.meta) + len(s.data) for s in self.streams)
        )

    @property
    def original_bytes(self) -> int:
        every = [*self.cas, *self.packs, *(o for s in self.streams for o in (*s.meta, *s.data))]
        return sum(o.original_bytes for o in every)


def make_object(kind: Kind, raw: bytes, level: int, **extra: Any) -> Outgoing:
    body = compress(raw, level)
    return Outgoing(kind, body, hashlib.sha256(body).hexdigest(), len(raw), **extra)


def collect_flush(
    root: Path,
    config: PublisherConfig,
    *,
    level: int,
    now: float,
    first_seen: MutableMapping[Path, float],
    block_seconds: float,
    state: PublishState | None = None,
) -> FlushPlan:
    """Select, compress and checksum every unshipped complete file under ``root``."""
    state = state or PublishState(root)
    layout = state.layout
    euids = _stream_euids(layout)
    plan = FlushPlan(new_ulid(now), euids[0] if euids else None)
    for euid in euids:
        batch = StreamBatch(euid, state.read_cursor(euid))
        blocker = _Blocker(now, first_seen, block_seconds)
        reach = _collect_plane(layout, batch, Plane.DATA, config, level, plan.problems, blocker)
        _collect_plane(layout, batch, Plane.META, config, level, plan.problems, blocker, reach)
        plan.streams.append(batch)
    if plan.carrier is not None:
        _collect_cas(state, config, level, plan)
    return plan


@dataclass(slots=True)
class _Blocker:
    now: float
    first_seen: MutableMapping[Path, float]
    block_seconds: float

    def expired(self, path: Path) -> bool:
        since = self.first_seen.setdefault(path, self.now)
        return self.now - since >= self.block_seconds


def _stream_euids(layout: StoreLayout) -> list[bytes]:
    try:
        names = os.listdir(layout.streams_dir)
    except FileNotFoundError:
        return []
    return sorted(e for e in map(parse_stream_dir_name, names) if e is not None)


def _collect_plane(
    layout: StoreLayout,
    batch: StreamBatch,
    plane: Plane,
    config: PublisherConfig,
    level: int,
    problems: list[Problem],
    blocker: _Blocker,
    data_reach: int | None = None,
) -> int:
    """Collect one plane's shippable segments in order; returns the highest sequence the
    plane reaches this flush (shipped before, collected now, or skipped).

    A meta segment is collected only if the data it can reference is reachable too: its
    header's ``data_high_water`` must not exceed ``data_reach``, so a meta object never lands
    before the data segments its executions need (architecture.md, ingest step 5)."""
    done = batch.cursor.meta if plane is Plane.META else batch.cursor.data
    target = batch.meta if plane is Plane.META else batch.data
    pending = [s for s in plane_sequences(layout, batch.euid, plane) if s > done]
    expected = done + 1
    for sequence in pending:
        while expected < sequence:  # a hole below an existing file
            path = layout.segment_path(batch.euid, plane, expected)
            if not blocker.expired(path):
                problems.append(Problem(path, "missing segment; the plane waits for it", False,
                                    ProblemCode.MISSING))  # fmt: skip
                return expected - 1
            problems.append(
                Problem(path, "missing segment skipped after the wait", True, ProblemCode.MISSING)
            )
            batch.skipped[plane].add(expected)
            expected += 1
        path = layout.segment_path(batch.euid, plane, sequence)
        expected = sequence + 1
        try:
            raw = path.read_bytes()
        except OSError as exc:
            problems.append(Problem(path, f"unreadable: {exc}", False, ProblemCode.UNREADABLE))
            return sequence - 1
        reason = _segment_problem(raw, plane, config)
        if reason is None and data_reach is not None and _meta_data_high_water(raw) > data_reach:
            problems.append(
                Problem(path, f"waits for data segments up to {_meta_data_high_water(raw)} "
                        f"(reachable: {data_reach})", False, ProblemCode.WAITS_FOR_DATA)
            )  # fmt: skip
            return sequence - 1
        if reason is None:
            obj = make_object(Kind(f"{plane.value}_segment"), raw, level, sequence=sequence,
                              source=path)  # fmt: skip
            if len(obj.body) > config.max_object_bytes:
                problems.append(_oversize(obj, config, "; the plane waits for it"))
                return sequence - 1
            target.append(obj)
            continue
        if reason.startswith("unsupported"):
            problems.append(Problem(path, reason, True, ProblemCode.UNSUPPORTED))
            batch.skipped[plane].add(sequence)
        elif blocker.expired(path):
            problems.append(Problem(path, reason + "; skipped after the wait", True))
            batch.skipped[plane].add(sequence)
        else:
            problems.append(Problem(path, reason + "; the plane waits for it", False))
            return sequence - 1
    return expected - 1 if pending else done


def _meta_data_high_water(raw: bytes) -> int:
    """``data_high_water`` of a meta segment header (bytes 34..42, after magic, version,
    sequence and euid)."""
    return int.from_bytes(raw[34:42], "big")


def _oversize(obj: Outgoing, config: PublisherConfig, consequence: str) -> Problem:
    where = obj.source or Path(f"<{obj.kind.value} {obj.flush_id}>")
    reason = (
        f"{obj.kind.value} compresses to {len(obj.body)} bytes, over the gateway's "
        f"max_object_bytes {config.max_object_bytes}{consequence}"
    )
    skipped = obj.kind not in (Kind.META, Kind.DATA)
    return Problem(where, reason, skipped, ProblemCode.OVERSIZE, len(obj.body))


def _segment_problem(raw: bytes, plane: Plane, config: PublisherConfig) -> str | None:
    if len(raw) < 42 or raw[:8] != _SEGMENT_MAGIC[plane]:
        return "not a segment file (magic or length)"
    if hashlib.sha256(raw[:-32]).digest() != raw[-32:]:
        return "segment checksum does not match"
    version = int.from_bytes(raw[8:10], "big")
    if version not in config.supported_segment_versions:
        accepted = list(config.supported_segment_versions)
        return f"unsupported segment version {version}; the gateway accepts {accepted}"
    return None


def _collect_cas(state: PublishState, config: PublisherConfig, level: int, plan: FlushPlan) -> None:
    small: dict[bytes, bytes] = {}
    digests: dict[bytes, str] = {}
    """Small values: the SHA-256 of the whole file, from the checksum pass (for the manifest)."""
    paths: dict[bytes, str] = {}
    found: list[Problem | tuple[Kind, bytes, bytes, str]] = []
    """In file order: problems, and tables and large values to compress."""
    for cid, path in _unshipped_cas(state):
        try:
            with open(path, "rb", buffering=0) as file:
                raw = file.readall()
        except FileNotFoundError:
            continue  # removed by retention meanwhile
        except OSError as exc:
            found.append(Problem(Path(path), f"unreadable: {exc}", False, ProblemCode.UNREADABLE))
            continue
        reason, digest = _cas_check(raw, cid, config)
        if reason is not None:
            code = ProblemCode.UNSUPPORTED if "unsupported" in reason else ProblemCode.CORRUPT
            found.append(Problem(Path(path), reason, True, code))
            continue
        _, _, codec, body_len = _CAS_HEAD.unpack_from(raw)
        if codec == CODEC_FUNCTION_TABLE or body_len >= config.large_value_threshold_bytes:
            found.append((Kind.TABLE if codec == CODEC_FUNCTION_TABLE else Kind.VALUE, raw, cid,
                          path))  # fmt: skip
        else:
            small[cid] = raw
            digests[cid] = digest
            paths[cid] = path
    large = [item for item in found if not isinstance(item, Problem)]
    packs = _group_packs(state, small, config.pack_max_entry_bytes, plan.flush_id)
    bodies = [pack_body_verified([(c, small[c], digests[c]) for c in p.members]) for p in packs]
    # zstd releases the GIL: compress on a few threads; results are used in plan order
    compressed = _compress_all([raw for _, raw, _, _ in large] + bodies, level)
    done = iter(compressed[: len(large)])
    for item in found:
        if isinstance(item, Problem):
            plan.problems.append(item)
            continue
        kind, raw, cid, path = item
        obj = _outgoing(kind, raw, next(done), cid=cid, source=Path(path))
        if len(obj.body) > config.max_object_bytes:
            plan.problems.append(_oversize(obj, config, "; not shipped, kept locally"))
        elif kind is Kind.TABLE:
            plan.cas.insert(0, obj)
        else:
            plan.cas.append(obj)
    for pack, raw, body in zip(packs, bodies, compressed[len(large) :], strict=True):
        obj = _outgoing(Kind.PACK, raw, body, flush_id=pack.flush_id, members=pack.members)
        _add_pack(plan, pack, obj, small, digests, paths, config, level)
    state.write_journal([JournalPack(p.flush_id or "", p.members) for p in plan.packs])


COMPRESS_WORKERS = 3
"""Threads compressing one flush's objects (zstd releases the GIL)."""
_PARALLEL_MIN_BYTES = 256 << 10
"""Below this many original bytes in all, compressing on threads costs more than it saves."""


def _compress_all(raws: list[bytes], level: int) -> list[bytes]:
    """``compress`` of each of ``raws``, in order (the same bytes as one at a time)."""
    if len(raws) < 2 or sum(map(len, raws)) < _PARALLEL_MIN_BYTES:
        return [compress(raw, level) for raw in raws]
    # biggest first so one large pack does not finish last on its own
    order = sorted(range(len(raws)), key=lambda i: -len(raws[i]))
    out: list[bytes] = [b""] * len(raws)
    with ThreadPoolExecutor(COMPRESS_WORKERS, thread_name_prefix="baml-zstd") as pool:
        bodies = pool.map(lambda i: compress(raws[i], level), order)
        for index, body in zip(order, bodies, strict=True):
            out[index] = body
    return out


def _outgoing(kind: Kind, raw: bytes, body: bytes, **extra: Any) -> Outgoing:
    return Outgoing(kind, body, hashlib.sha256(body).hexdigest(), len(raw), **extra)


def _add_pack(
    plan: FlushPlan,
    pack: JournalPack,
    obj: Outgoing | None,
    small: dict[bytes, bytes],
    digests: dict[bytes, str],
    paths: dict[bytes, str],
    config: PublisherConfig,
    level: int,
) -> None:
    """Plan ``pack`` (``obj``: already built), split in halves (new flush ids) while it
    compresses over the limit."""
    if obj is None:
        body = pack_body_verified([(c, small[c], digests[c]) for c in pack.members])
        obj = make_object(Kind.PACK, body, level, flush_id=pack.flush_id, members=pack.members)
    if len(obj.body) <= config.max_object_bytes:
        plan.packs.append(obj)
    elif len(pack.members) == 1:
        single = Outgoing(obj.kind, obj.body, obj.sha256, obj.original_bytes,
                          source=Path(paths[pack.members[0]]))  # fmt: skip
        plan.problems.append(_oversize(single, config, " even alone in a pack; not shipped"))
    else:
        half = len(pack.members) // 2
        for members in (pack.members[:half], pack.members[half:]):
            part = JournalPack(new_ulid(), members)
            _add_pack(plan, part, None, small, digests, paths, config, level)


def _cas_check(raw: bytes, cid: bytes, config: PublisherConfig) -> tuple[str | None, str]:
    """(why ``raw`` cannot ship or None, the SHA-256 hex of the whole file). The checksum
    covers all but the trailing 32 bytes; the whole file's digest continues that hash over
    the trailer, so the body is hashed once."""
    if len(raw) < 84 or raw[:8] != CAS_MAGIC:
        return "not a CAS file (magic or length)", ""
    _, version, codec, body_len = _CAS_HEAD.unpack_from(raw)
    if version not in config.supported_cas_versions:
        return f"unsupported CAS version {version}", ""
    if codec not in (CODEC_VALUE, CODEC_FUNCTION_TABLE):
        return f"unknown CAS codec {codec}", ""
    if raw[20:52] != cid or len(raw) != 84 + body_len:
        return "CAS file does not match its name or length", ""
    view = memoryview(raw)
    hasher = hashlib.sha256(view[:-32])
    if hasher.digest() != raw[-32:]:
        return "CAS checksum does not match", ""
    hasher.update(view[-32:])
    return None, hasher.hexdigest()


def _unshipped_cas(state: PublishState) -> list[tuple[bytes, str]]:
    """(CID, path) of every CAS file not in the shipped ledger, sorted by directory and name."""
    layout, shipped = state.layout, state.shipped()
    found: list[tuple[bytes, str]] = []
    cas_dir = os.fspath(layout.cas_dir)
    try:
        with os.scandir(cas_dir) as entries:
            prefixes = sorted(e.name for e in entries)
    except FileNotFoundError:
        return found
    for prefix in prefixes:
        directory = f"{cas_dir}/{prefix}"
        try:
            with os.scandir(directory) as entries:
                names = sorted(e.name for e in entries)
        except (NotADirectoryError, FileNotFoundError):
            continue
        for name in names:
            cid = parse_cas_file_name(name)
            if cid is not None and cid not in shipped:
                found.append((cid, f"{directory}/{name}"))
    return found


def unshipped_value_bytes(root: Path, state: PublishState | None = None) -> int:
    """Total size of CAS files not in the shipped ledger (the early-flush trigger)."""
    total = 0
    for _, path in _unshipped_cas(state or PublishState(root)):
        try:
            total += os.stat(path).st_size
        except FileNotFoundError:
            continue
    return total


def _group_packs(
    state: PublishState, small: dict[bytes, bytes], limit: int, flush_id: str
) -> list[JournalPack]:
    packs: list[JournalPack] = []
    left = dict(small)
    for old in state.read_journal():
        if old.members and all(c in left for c in old.members):
            packs.append(old)
            for cid in old.members:
                del left[cid]
    current: list[bytes] = []
    size = 0

    def new_id() -> str:
        return flush_id if not any(p.flush_id == flush_id for p in packs) else new_ulid()

    for cid in sorted(left):
        raw_len = len(left[cid])
        if current and (size + raw_len > limit or len(current) >= MAX_PACK_ENTRIES):
            packs.append(JournalPack(new_id(), tuple(current)))
            current, size = [], 0
        current.append(cid)
        size += raw_len
    if current:
        packs.append(JournalPack(new_id(), tuple(current)))
    return packs
