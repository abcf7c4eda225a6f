"""Local retention: expire shipped values, and free shipped files first under disk pressure.

- A value or table whose shipped-ledger time is ``shipped_value_retention_seconds`` or more
  before ``now`` is removed, file first, then its ledger entry (a crash in between leaves an
  entry without a file, which :func:`apply_retention` also drops).
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


def _shipped_values(state: PublishState) -> list[tuple[int, bytes, Path]]:
    """``(shipped_at, cid, value path)`` of every ledger entry, oldest first."""
    layout = state.layout
    return sorted((at, cid, layout.cas_path(cid)) for cid, at in state.shipped().items())


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
) -> RetentionReport:
    """One retention pass over the store at ``root``; never removes an unshipped file."""
    state = state or PublishState(root)
    layout = state.layout
    report = RetentionReport()
    remove: list[Path] = []
    forget: list[bytes] = []
    keep: list[tuple[bytes, Path]] = []
    for shipped_at, cid, value in _shipped_values(state):
        if now - shipped_at >= retention_seconds or not value.exists():
            remove.append(value)
            forget.append(cid)
            report.expired_values += 1
        else:
            keep.append((cid, value))
    if budget_bytes is not None:
        usage = scan_physical_usage(layout) - _sizes(remove)
        segments = [(None, p) for _, p in _shipped_segments(state)]
        candidates: list[tuple[bytes | None, Path]] = [*segments, *keep]
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
