"""The CAS part of a flush: unshipped tables and values become objects and packs, in batches.

:func:`collect_cas` reads the CAS files that are not in the shipped ledger in two passes, so the
big objects can ship while the rest is still being read: first, as the listing finds them, the
files whose size makes them large values, in batches of growing size (4, 8, 16... files); then
every other file. Tables and large values are compressed and hashed on a few threads while the
reading goes on, and each batch is yielded once compressed, in order. Last the small values are
grouped into packs, built, listed in the in-flight journal (while the packs compress) and
yielded. Every yielded object is already in the plan (tables at the front of ``plan.cas``, values
after them, packs in ``plan.packs``, files that cannot ship in ``plan.problems``); the plan is
complete once the iterator is exhausted. The selection rules are in
:mod:`baml_studio.publisher.collect`.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from baml_studio.format.cas import CAS_MAGIC, CAS_OVERHEAD_BYTES, CODEC_FUNCTION_TABLE, CODEC_VALUE
from baml_studio.publisher.config import PublisherConfig
from baml_studio.publisher.pack import MAX_PACK_ENTRIES, compress, pack_body_verified
from baml_studio.publisher.plan import (
    FlushPlan,
    Kind,
    Outgoing,
    Problem,
    ProblemCode,
    make_object,
    oversize,
)
from baml_studio.publisher.state import JournalPack, PublishState, new_ulid
from baml_studio.store.layout import parse_cas_file_name

_CAS_HEAD = struct.Struct(">8sHHQ")
COMPRESS_WORKERS = 3
"""Threads compressing and hashing a flush's tables, large values and packs (zstd and SHA-256
release the GIL), while the collector reads on."""


FIRST_BATCH = 4
"""Large values in the first batch; each next batch is twice as big. A small first batch lets
the first PUTs start early (before the listing ends); bigger ones later keep the authorize
calls few."""


@dataclass(frozen=True, slots=True)
class _CasFile:
    cid: bytes
    path: str
    size: int
    """From the directory scan, only to choose the pass (-1: unknown, read in the second)."""


@dataclass(slots=True)
class _Small:
    """The small values read so far, by CID."""

    raw: dict[bytes, bytes] = field(default_factory=dict)
    digest: dict[bytes, str] = field(default_factory=dict)
    """SHA-256 hex of the whole file, from the checksum pass (for the pack manifest)."""
    path: dict[bytes, str] = field(default_factory=dict)


_Single = tuple[Kind, bytes, bytes, str]
"""A table or large value to ship alone: kind, whole file, CID, path."""


def collect_cas(
    state: PublishState, config: PublisherConfig, level: int, plan: FlushPlan
) -> Generator[list[Outgoing], None, None]:
    """Add the unshipped CAS files to ``plan``, yielding each batch of new objects as soon as
    it is planned (see the module docstring). Run it after ``collect_segments`` made ``plan``."""
    if plan.carrier is None:
        return
    large_at = CAS_OVERHEAD_BYTES + config.large_value_threshold_bytes
    small = _Small()
    with ThreadPoolExecutor(COMPRESS_WORKERS, thread_name_prefix="baml-zstd") as pool:
        singles = _Singles(pool, plan, config, level)
        large: list[_CasFile] = []
        rest: list[_CasFile] = []
        want = FIRST_BATCH
        for count, file in enumerate(_scan_unshipped(state), 1):  # ship while listing
            if count % READ_CHUNK == 0:
                yield from singles.ready()
            if file.size < large_at:
                rest.append(file)
                continue
            large.append(file)
            if len(large) == want:
                singles.submit(_read(large, config, plan.problems, small))
                large, want = [], want * 2
        singles.submit(_read(large, config, plan.problems, small))
        for start in range(0, len(rest), READ_CHUNK):
            singles.submit(_read(rest[start : start + READ_CHUNK], config, plan.problems, small))
            yield from singles.ready()
        packs = _group_packs(state, small.raw, config.pack_max_entry_bytes, plan.flush_id)
        bodies = [pack_body_verified([(c, small.raw[c], small.digest[c]) for c in p.members])
                  for p in packs]  # fmt: skip
        compressing = [pool.submit(_compressed, body, level) for body in bodies]
        state.write_journal(packs)  # meanwhile; rewritten below if a pack had to be split
        yield from singles.ready(wait=True)
        for pack, raw, done in zip(packs, bodies, compressing, strict=True):
            body, sha256 = done.result()
            obj = Outgoing(Kind.PACK, body, sha256, len(raw), flush_id=pack.flush_id,
                           members=pack.members)  # fmt: skip
            _add_pack(plan, pack, obj, small, config, level)
    planned = [JournalPack(p.flush_id or "", p.members) for p in plan.packs]
    if planned != packs:
        state.write_journal(planned)
    if plan.packs:
        yield list(plan.packs)


READ_CHUNK = 128
"""Files listed or read between two looks at the compressing batches."""


def _compressed(raw: bytes, level: int) -> tuple[bytes, str]:
    """The zstd frame of ``raw`` and its SHA-256 hex (both release the GIL: run on a pool)."""
    body = compress(raw, level)
    return body, hashlib.sha256(body).hexdigest()


class _Singles:
    """Tables and large values compressing on the pool while the collector reads on. Batches
    are planned into ``plan`` in the order they were submitted, once compressed."""

    def __init__(
        self, pool: ThreadPoolExecutor, plan: FlushPlan, config: PublisherConfig, level: int
    ) -> None:
        self._pool, self._plan, self._config, self._level = pool, plan, config, level
        self._pending: deque[tuple[list[_Single], list[Future[tuple[bytes, str]]]]] = deque()

    def submit(self, singles: list[_Single]) -> None:
        if singles:
            jobs = [self._pool.submit(_compressed, raw, self._level) for _, raw, _, _ in singles]
            self._pending.append((singles, jobs))

    def ready(self, *, wait: bool = False) -> Iterator[list[Outgoing]]:
        """Plan and yield each batch whose compression finished (with ``wait``: every batch),
        oldest first; an oversize object becomes a problem."""
        while self._pending and (wait or all(job.done() for job in self._pending[0][1])):
            singles, jobs = self._pending.popleft()
            batch: list[Outgoing] = []
            for (kind, raw, cid, path), job in zip(singles, jobs, strict=True):
                body, sha256 = job.result()
                obj = Outgoing(kind, body, sha256, len(raw), cid=cid, source=Path(path))
                if len(body) > self._config.max_object_bytes:
                    self._plan.problems.append(oversize(obj, self._config, _KEPT_LOCALLY))
                    continue
                if kind is Kind.TABLE:
                    self._plan.cas.insert(0, obj)
                else:
                    self._plan.cas.append(obj)
                batch.append(obj)
            if batch:
                yield batch


_KEPT_LOCALLY = "; not shipped, kept locally"


def _read(
    files: list[_CasFile], config: PublisherConfig, problems: list[Problem], small: _Small
) -> list[_Single]:
    """Read and check ``files``: problems to ``problems``, small values to ``small``; returns
    the tables and large values, in file order."""
    singles: list[_Single] = []
    for file in files:
        cid, path = file.cid, file.path
        try:
            raw = _read_file(path, file.size)
        except FileNotFoundError:
            continue  # removed by retention meanwhile
        except OSError as exc:
            unreadable = f"unreadable: {exc}"
            problems.append(Problem(Path(path), unreadable, False, ProblemCode.UNREADABLE))
            continue
        reason, digest = _cas_check(raw, cid, config)
        if reason is not None:
            code = ProblemCode.UNSUPPORTED if "unsupported" in reason else ProblemCode.CORRUPT
            problems.append(Problem(Path(path), reason, True, code))
            continue
        _, _, codec, body_len = _CAS_HEAD.unpack_from(raw)
        if codec == CODEC_FUNCTION_TABLE:
            singles.append((Kind.TABLE, raw, cid, path))
        elif body_len >= config.large_value_threshold_bytes:
            singles.append((Kind.VALUE, raw, cid, path))
        else:
            small.raw[cid], small.digest[cid], small.path[cid] = raw, digest, path
    return singles


def _read_file(path: str, size: int) -> bytes:
    """The whole file; ``size`` (from the listing) sizes the first read, so a file that did not
    change since is read with one call."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, max(size, 0) + 1)
        if len(data) <= size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):  # it grew: read on to the end
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _add_pack(
    plan: FlushPlan,
    pack: JournalPack,
    obj: Outgoing | None,
    small: _Small,
    config: PublisherConfig,
    level: int,
) -> None:
    """Plan ``pack`` (``obj``: already built), split in halves (new flush ids) while it
    compresses over the limit."""
    if obj is None:
        body = pack_body_verified([(c, small.raw[c], small.digest[c]) for c in pack.members])
        obj = make_object(Kind.PACK, body, level, flush_id=pack.flush_id, members=pack.members)
    if len(obj.body) <= config.max_object_bytes:
        plan.packs.append(obj)
    elif len(pack.members) == 1:
        single = Outgoing(obj.kind, obj.body, obj.sha256, obj.original_bytes,
                          source=Path(small.path[pack.members[0]]))  # fmt: skip
        plan.problems.append(oversize(single, config, " even alone in a pack; not shipped"))
    else:
        half = len(pack.members) // 2
        for members in (pack.members[:half], pack.members[half:]):
            _add_pack(plan, JournalPack(new_ulid(), members), None, small, config, level)


def _cas_check(raw: bytes, cid: bytes, config: PublisherConfig) -> tuple[str | None, str]:
    """(why ``raw`` cannot ship or None, the SHA-256 hex of the whole file). The checksum
    covers all but the trailing 32 bytes; the whole file's digest continues that hash over
    the trailer, so the body is hashed once."""
    if len(raw) < CAS_OVERHEAD_BYTES or raw[:8] != CAS_MAGIC:
        return "not a CAS file (magic or length)", ""
    _, version, codec, body_len = _CAS_HEAD.unpack_from(raw)
    if version not in config.supported_cas_versions:
        return f"unsupported CAS version {version}", ""
    if codec not in (CODEC_VALUE, CODEC_FUNCTION_TABLE):
        return f"unknown CAS codec {codec}", ""
    if raw[20:52] != cid or len(raw) != CAS_OVERHEAD_BYTES + body_len:
        return "CAS file does not match its name or length", ""
    view = memoryview(raw)
    hasher = hashlib.sha256(view[:-32])
    if hasher.digest() != raw[-32:]:
        return "CAS checksum does not match", ""
    hasher.update(view[-32:])
    return None, hasher.hexdigest()


FULL_SCAN_SECONDS = 60.0
"""The CAS scan lists every shard directory at least this often, whatever its marks say."""

SETTLED_NS = 2_000_000_000
"""A shard directory whose mtime is less than this old when a scan starts gets no mark: file
timestamps have a granularity (a clock tick; up to 2 s on some filesystems), so an entry
created just after the listing could leave the mtime where it was."""


def _scan_unshipped(state: PublishState) -> Iterator[_CasFile]:
    """Every CAS file not in the shipped ledger, sorted by directory and name.

    A shard directory whose every file was shipped when last listed, and which has not changed
    since (the same inode and mtime: see :class:`CasScanCache`), is not listed again: with the
    shipped values kept for the retention period, listing every file on every flush cost a
    process ~100 ms of CPU a second at 45,000 files to find the few new ones."""
    cache, before = state.cas_scan, state.ledger_losses
    layout, shipped = state.layout, state.shipped()  # may reload the ledger: a loss
    losses = state.ledger_losses
    started_ns, now = time.time_ns(), time.monotonic()
    if cache.ledger_losses != losses or now - cache.full_at >= FULL_SCAN_SECONDS:
        cache.marks.clear()
        cache.ledger_losses, cache.full_at = losses, now
    marks = cache.marks
    cas_dir = os.fspath(layout.cas_dir)
    try:
        with os.scandir(cas_dir) as scan:
            prefixes = sorted(e.name for e in scan)
    except FileNotFoundError:
        return
    for prefix in prefixes:
        directory = f"{cas_dir}/{prefix}"
        try:
            info = os.stat(directory)  # before the listing: a change during it moves the mark
        except OSError:
            marks.pop(prefix, None)
            continue
        mark = (info.st_ino, info.st_mtime_ns)
        if marks.get(prefix) == mark:
            continue
        found: list[tuple[str, bytes, os.DirEntry[str]]] = []
        try:
            with os.scandir(directory) as scan:
                for entry in scan:  # the shipped ones (most, in a long run) are not sorted
                    cid = parse_cas_file_name(entry.name)
                    if cid is not None and cid not in shipped:
                        found.append((entry.name, cid, entry))
        except (NotADirectoryError, FileNotFoundError):
            marks.pop(prefix, None)
            continue
        if (
            found
            or info.st_mtime_ns > started_ns - SETTLED_NS
            or not before == losses == state.ledger_losses  # the snapshot may be stale
        ):
            marks.pop(prefix, None)
        else:
            marks[prefix] = mark
        found.sort(key=_name)
        for name, cid, entry in found:
            yield _CasFile(cid, f"{directory}/{name}", _size(entry))


def _name(item: tuple[str, bytes, os.DirEntry[str]]) -> str:
    return item[0]


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat().st_size
    except OSError:
        return -1


def unshipped_value_bytes(root: Path, state: PublishState | None = None) -> int:
    """Total size of CAS files not in the shipped ledger (the early-flush trigger)."""
    return sum(max(0, f.size) for f in _scan_unshipped(state or PublishState(root)))


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
