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

:func:`collect_flush` builds the whole plan. A flush that ships while it collects calls
:func:`collect_segments`, then iterates :func:`~baml_studio.publisher.collect_cas.collect_cas`,
which adds the CAS objects and packs to the plan in batches (see there).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from baml_studio.publisher.collect_cas import collect_cas, unshipped_value_bytes
from baml_studio.publisher.config import PublisherConfig
from baml_studio.publisher.plan import (
    FlushPlan,
    Kind,
    Outgoing,
    Problem,
    ProblemCode,
    StreamBatch,
    make_object,
    oversize,
)
from baml_studio.publisher.state import PublishState, new_ulid
from baml_studio.store.layout import Plane, StoreLayout, parse_stream_dir_name
from baml_studio.store.segments import plane_sequences

_SEGMENT_MAGIC = {Plane.META: b"BAMLMET1", Plane.DATA: b"BAMLDAT1"}


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
    plan = collect_segments(state, config, level=level, now=now, first_seen=first_seen,
                            block_seconds=block_seconds)  # fmt: skip
    for _ in collect_cas(state, config, level, plan):
        pass
    return plan


def collect_segments(
    state: PublishState,
    config: PublisherConfig,
    *,
    level: int,
    now: float,
    first_seen: MutableMapping[Path, float],
    block_seconds: float,
) -> FlushPlan:
    """A new plan holding the segments to ship (and their problems), no CAS object yet: the
    first step of a flush; ``collect_cas`` on this plan must come after it, never before."""
    layout = state.layout
    euids = _stream_euids(layout)
    plan = FlushPlan(new_ulid(now), euids[0] if euids else None)
    for euid in euids:
        batch = StreamBatch(euid, state.read_cursor(euid))
        blocker = _Blocker(now, first_seen, block_seconds)
        reach = _collect_plane(layout, batch, Plane.DATA, config, level, plan.problems, blocker)
        _collect_plane(layout, batch, Plane.META, config, level, plan.problems, blocker, reach)
        plan.streams.append(batch)
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
                problems.append(oversize(obj, config, "; the plane waits for it"))
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


__all__ = [
    "FlushPlan",
    "Kind",
    "Outgoing",
    "Problem",
    "ProblemCode",
    "StreamBatch",
    "collect_flush",
    "collect_segments",
    "unshipped_value_bytes",
]
