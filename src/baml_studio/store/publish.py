"""Complete-or-absent publication of one file, the admission gate and indeterminate state.

One :class:`Publisher` belongs to one open writer. Under ``publish.lock`` it reads the usage
ledger, checks the disk budget, writes ``tmp/<uuid>.pending`` (``O_EXCL``), fsyncs it, rechecks
that the final path is absent, renames, fsyncs the final directory and rewrites the ledger.
A failure before the rename loses nothing but the attempt. A failure after it makes the
publication *indeterminate*: the writer refuses everything (``Blocked``) until
:meth:`Publisher.resolve` re-fsyncs the directory and rebuilds the ledger from a physical scan.

The gate latches on the first budget rejection or ENOSPC (``DISK``) and on an accounting
failure (``UNAVAILABLE``); it never reopens for the life of the writer. A ``terminal``
publication gets exactly one attempt past a latched gate, still subject to the budget.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from baml_studio.format.errors import SegmentReadError
from baml_studio.store.config import DiskBudget
from baml_studio.store.errors import StoreError, StoreFailureReason, reason_for_oserror
from baml_studio.store.fsops import (
    FileSystem,
    StrPath,
    discard,
    ensure_dirs,
    write_file,
    write_file_durably,
)
from baml_studio.store.layout import StoreLayout
from baml_studio.store.locks import FileLock
from baml_studio.store.results import (
    AdmissionGate,
    Blocked,
    Indeterminate,
    IndeterminateToken,
    Lost,
    PublicationKind,
)
from baml_studio.store.usage import (
    USAGE_STATE_BYTES,
    read_usage_state,
    scan_physical_usage,
    write_usage_state,
)

_TOKENS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Written:
    """The file is durable at its final path and counted."""


@dataclass(frozen=True, slots=True)
class Exists:
    """The final path already existed at the recheck; nothing was written."""


Attempt = Written | Exists | Lost | Blocked | Indeterminate


def admits(budget: DiskBudget, usage: int, size: int, free: int) -> bool:
    """The disk guard: ``usage + size + 48 <= max`` and ``free - (size + 48) >= minimum_free``."""
    cost = size + USAGE_STATE_BYTES
    return usage + cost <= budget.max_project_bytes and free - cost >= budget.minimum_free_bytes


class Publisher:
    """Publication machinery of one writer. Thread-safe; one publication at a time."""

    def __init__(self, layout: StoreLayout, fs: FileSystem, budget: DiskBudget | None) -> None:
        self._layout = layout
        self._fs = fs
        self._budget = budget
        self._gate = AdmissionGate.OPEN
        self._terminal_attempt_used = False
        self._pending: IndeterminateToken | None = None
        self._mutex = threading.Lock()
        self._known_dirs: set[str] = set()
        """Directories this writer created or saw; CAS fan-out dirs are never removed while
        a writer holds the stream (``clean`` needs the exclusive lease)."""

    @property
    def gate(self) -> AdmissionGate:
        return self._gate

    @property
    def indeterminate(self) -> IndeterminateToken | None:
        return self._pending

    def refusal(self) -> Blocked | Lost | None:
        """Why an ordinary (non-terminal) publication would be refused right now, if it would."""
        if self._pending is not None:
            return Blocked(self._pending)
        if self._gate is not AdmissionGate.OPEN:
            return Lost(self._gate_reason())
        return None

    def publish(
        self,
        kind: PublicationKind,
        final: Path,
        payload: Callable[[], bytes],
        *,
        sequence: int | None = None,
        terminal: bool = False,
    ) -> Attempt:
        """Publish ``payload()`` at ``final``; ``payload`` is called only once admitted."""
        with self._mutex:
            if self._pending is not None:
                return Blocked(self._pending)
            if self._gate is not AdmissionGate.OPEN:
                if not terminal or self._terminal_attempt_used:
                    return Lost(self._gate_reason())
                self._terminal_attempt_used = True
            data = payload()
            try:
                lock = FileLock.acquire(self._layout.publish_lock, exclusive=True)
            except OSError as exc:
                return self._lost(exc)
            try:
                return self._publish_locked(kind, final, data, sequence)
            finally:
                lock.release()

    def publish_batch(
        self, kind: PublicationKind, items: list[tuple[StrPath, bytes]]
    ) -> list[Attempt]:
        """Publish many files with one group commit (the profiler's CAS objects).

        Each file is still complete-or-absent (temp file, rename), but the durability barriers
        are shared: write every temp file, one ``syncfs``, rename each, one ``syncfs`` (the
        directory entries), one ledger update. A file is renamed only after its bytes are
        durable, and nothing is reported written before the second barrier.
        """
        with self._mutex:
            refusal = self.refusal()
            if refusal is not None:
                return [refusal] * len(items)
            try:
                lock = FileLock.acquire(self._layout.publish_lock, exclusive=True)
            except OSError as exc:
                return [self._lost(exc)] * len(items)
            try:
                return self._publish_batch_locked(kind, items)
            finally:
                lock.release()

    def _publish_batch_locked(
        self, kind: PublicationKind, items: list[tuple[StrPath, bytes]]
    ) -> list[Attempt]:
        usage = self._current_usage()
        if isinstance(usage, Lost):
            return [usage] * len(items)
        results: list[Attempt | None] = [None] * len(items)
        staged: list[tuple[int, str, StrPath, int]] = []
        tmp_names = self._layout.new_tmp_names(len(items))
        free = 0
        if self._budget is not None:
            try:
                free = self._fs.free_bytes(self._layout.root)
            except OSError as exc:
                return [self._lost(exc)] * len(items)
        added = 0
        for index, (final, data) in enumerate(items):
            if self._gate is not AdmissionGate.OPEN:
                results[index] = Lost(self._gate_reason())
                continue
            if self._budget is not None and not admits(
                self._budget, usage + added, len(data), free - added
            ):
                self._latch(AdmissionGate.DISK)
                results[index] = Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)
                continue
            tmp = tmp_names[index]
            try:
                write_file(self._fs, tmp, data)
            except OSError as exc:
                results[index] = self._lost(exc)
                continue
            staged.append((index, tmp, final, len(data)))
            added += len(data)
        if staged:
            try:
                self._fs.sync_filesystem(self._layout.root)
            except OSError as exc:
                for index, tmp, _, _ in staged:
                    discard(self._fs, tmp)
                    results[index] = self._lost(exc)
                staged = []
        renamed: list[tuple[int, StrPath, int]] = []
        for index, tmp, final, size in staged:
            try:
                parent = os.path.dirname(final)
                if parent not in self._known_dirs:
                    ensure_dirs(self._fs, self._layout.root, Path(parent))
                    self._known_dirs.add(parent)
                self._fs.rename_new(tmp, final)
            except FileExistsError:
                discard(self._fs, tmp)
                results[index] = Exists()
                continue
            except OSError as exc:
                discard(self._fs, tmp)
                results[index] = self._lost(exc)
                continue
            renamed.append((index, final, size))
        if renamed:
            try:
                self._fs.sync_filesystem(self._layout.root)
                write_usage_state(
                    self._fs, self._layout, usage + sum(size for _, _, size in renamed)
                )
            except OSError:
                self._pending = IndeterminateToken(next(_TOKENS), kind, Path(renamed[0][1]))
                for index, _, _ in renamed:
                    results[index] = Indeterminate(self._pending, None)
                return [r if r is not None else Blocked(self._pending) for r in results]
            for index, _, _ in renamed:
                results[index] = Written()
        return [r if r is not None else Lost(StoreFailureReason.STORE_UNAVAILABLE) for r in results]

    def resolve(self) -> bool:
        """Re-fsync the indeterminate file's directory and rebuild the ledger from a physical
        scan. True once nothing is indeterminate; False if it still fails."""
        with self._mutex:
            token = self._pending
            if token is None:
                return True
            try:
                self._fs.fsync_dir(token.path.parent)
                with FileLock.acquire(self._layout.publish_lock, exclusive=True):
                    write_usage_state(self._fs, self._layout, scan_physical_usage(self._layout))
            except (OSError, StoreError):
                return False
            self._pending = None
            return True

    def _publish_locked(
        self, kind: PublicationKind, final: Path, data: bytes, sequence: int | None
    ) -> Attempt:
        usage = self._current_usage()
        if isinstance(usage, Lost):
            return usage
        if self._budget is not None:
            try:
                free = self._fs.free_bytes(self._layout.root)
            except OSError as exc:
                return self._lost(exc)
            if not admits(self._budget, usage, len(data), free):
                self._latch(AdmissionGate.DISK)
                return Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)
        tmp = self._layout.new_tmp_path()
        try:
            write_file_durably(self._fs, tmp, data)
        except OSError as exc:
            return self._lost(exc)
        try:
            ensure_dirs(self._fs, self._layout.root, final.parent)
            self._fs.rename_new(tmp, final)
        except FileExistsError:
            discard(self._fs, tmp)
            return Exists()
        except OSError as exc:
            discard(self._fs, tmp)
            return self._lost(exc)
        try:
            self._fs.fsync_dir(final.parent)
            write_usage_state(self._fs, self._layout, usage + len(data))
        except OSError:
            self._pending = IndeterminateToken(next(_TOKENS), kind, final)
            return Indeterminate(self._pending, sequence)
        return Written()

    def _current_usage(self) -> int | Lost:
        """The ledger's usage; a missing or corrupt ledger is rebuilt from a physical scan."""
        try:
            usage = read_usage_state(self._layout)
        except SegmentReadError:
            usage = None
        except OSError as exc:
            return self._lost(exc)
        if usage is not None:
            return usage
        try:
            return scan_physical_usage(self._layout)
        except (OSError, StoreError):
            self._latch(AdmissionGate.UNAVAILABLE)
            return Lost(StoreFailureReason.STORE_UNAVAILABLE)

    def _lost(self, exc: OSError) -> Lost:
        reason = reason_for_oserror(exc)
        if reason is StoreFailureReason.DISK_GUARD_EXCEEDED:
            self._latch(AdmissionGate.DISK)
        return Lost(reason)

    def _latch(self, gate: AdmissionGate) -> None:
        if self._gate is AdmissionGate.OPEN:
            self._gate = gate

    def _gate_reason(self) -> StoreFailureReason:
        if self._gate is AdmissionGate.DISK:
            return StoreFailureReason.DISK_GUARD_EXCEEDED
        return StoreFailureReason.STORE_UNAVAILABLE
