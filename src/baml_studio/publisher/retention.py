"""Local retention: expire shipped values, and free shipped files first under disk pressure.

- A value or table whose shipped-ledger time is ``shipped_value_retention_seconds`` or more
  before ``now`` is removed, file first, then its ledger entry (a crash in between leaves an
  entry without a file, which :func:`apply_retention` drops when asked to check the files, as
  a publisher's first pass does, and otherwise once the entry expires).
- Under disk pressure (physical usage above ``budget_bytes``) shipped files are removed oldest
  first: shipped segments (at or below their plane cursor) by modification time, then the
  remaining shipped values and tables by ledger time. Unshipped files are never removed here:
  the profiler stops recording at its own budget instead, so the oldest unshipped segments are
  never dropped before shipped ones (they are never dropped at all).
- Every removal happens under ``publish.lock``, and the ``usage.state`` ledger is rebuilt from a
  physical scan afterwards, so the profiler's disk guard sees the freed bytes.

Not done: the ledger rebuild is a full directory walk per pass that removed something.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from baml_studio.publisher.state import PublishState
from baml_studio.store.fsops import OsFileSystem
from baml_studio.store.layout import Plane, StoreLayout, parse_stream_dir_name
from baml_studio.store.locks import FileLock
from baml_studio.store.segments import plane_sequences
from baml_studio.store.usage import scan_physical_usage, write_usage_state


@dataclass(slots=True)
class RetentionReport:
    expired_values: int = 0
    pressure_removed: int = 0
    freed_bytes: int = 0
    usage_bytes: int | None = None
    removed: list[Path] = field(default_factory=list)


def delete_files(layout: StoreLayout, paths: Iterable[Path]) -> int:
    """Remove files under ``publish.lock`` and rebuild the usage ledger; returns bytes freed."""
    freed = 0
    with FileLock.acquire(layout.publish_lock, exclusive=True):
        for path in paths:
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            freed += size
        write_usage_state(OsFileSystem(), layout, scan_physical_usage(layout))
    return freed


def _split_values(
    state: PublishState, retention_seconds: float, now: float, check_files: bool
) -> tuple[list[tuple[bytes, Path]], list[tuple[int, bytes]]]:
    """The ledger's entries as (to remove: ``(cid, value path)`` of the expired ones and, when
    ``check_files``, of those whose file is gone; to keep: ``(shipped_at, cid)``), each oldest
    first. A path is built only for an entry that goes: a pass over a ledger of many
    thousands of shipped values that are all young costs a dict walk, not a ``Path`` and a
    ``stat`` per entry."""
    layout = state.layout
    expired: list[tuple[int, bytes]] = []
    kept: list[tuple[int, bytes]] = []
    for cid, at in state.shipped().items():
        if now - at >= retention_seconds or (
            check_files and not os.path.exists(layout.cas_path_str(cid))
        ):
            expired.append((at, cid))
        else:
            kept.append((at, cid))
    expired.sort()
    kept.sort()
    return [(cid, layout.cas_path(cid)) for _, cid in expired], kept


def _shipped_segments(state: PublishState) -> list[tuple[float, Path]]:
    layout = state.layout
    found: list[tuple[float, Path]] = []
    try:
        names = os.listdir(layout.streams_dir)
    except FileNotFoundError:
        return found
    for euid in filter(None, map(parse_stream_dir_name, names)):
        cursor = state.read_cursor(euid)
        for plane, done in ((Plane.META, cursor.meta), (Plane.DATA, cursor.data)):
            for sequence in plane_sequences(layout, euid, plane):
                if sequence <= done:
                    path = layout.segment_path(euid, plane, sequence)
                    try:
                        found.append((path.stat().st_mtime, path))
                    except FileNotFoundError:
                        continue
    return sorted(found)


def apply_retention(
    root: Path,
    *,
    retention_seconds: float,
    now: float,
    budget_bytes: int | None = None,
    state: PublishState | None = None,
    check_files: bool = True,
) -> RetentionReport:
    """One retention pass over the store at ``root``; never removes an unshipped file.
    ``check_files``: also drop the entries whose file is gone (a crash between a removal and
    its ledger update); a long-lived publisher asks for it on its first pass only: it is a
    ``stat`` per shipped value, and an entry it would drop early is otherwise dropped when it
    expires (removing an absent file is a no-op)."""
    state = state or PublishState(root)
    layout = state.layout
    report = RetentionReport()
    gone, kept = _split_values(state, retention_seconds, now, check_files)
    remove = [path for _, path in gone]
    forget = [cid for cid, _ in gone]
    report.expired_values = len(gone)
    if budget_bytes is not None:
        usage = scan_physical_usage(layout) - _sizes(remove)
        segments = [(None, p) for _, p in _shipped_segments(state)]
        values = ((cid, layout.cas_path(cid)) for _, cid in kept)
        candidates: Iterable[tuple[bytes | None, Path]] = itertools.chain(segments, values)
        for owner, path in candidates:
            if usage <= budget_bytes:
                break
            usage -= _sizes([path])
            remove.append(path)
            if owner is not None:
                forget.append(owner)
            report.pressure_removed += 1
    if remove:
        report.freed_bytes = delete_files(layout, remove)
        report.removed = remove
    state.forget_shipped(forget)  # after the files: a crash between leaves entries, dropped later
    report.usage_bytes = scan_physical_usage(layout) if budget_bytes is not None else None
    return report


def _sizes(paths: Iterable[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total
