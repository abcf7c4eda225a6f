"""In-process serialisation of ledger decisions, and the cache of visible ledger entries.

chDB (and ClickHouse) has no compare-and-set, so the store decides "created, existing or
conflict" for a ``(scope, generation, batch_id)`` under :class:`KeyLocks`, one holder per key.
An erasure of a scope and generation excludes every put of the same scope and generation
(:class:`ScopeGate`), so no batch is half-written across an erasure. :class:`LedgerCache`
remembers visible entries, so a repeated batch costs no query.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from baml_studio.gateway.config import Scope


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One visible batch, as the ledger table records it."""

    content_digest: str
    row_count: int
    root_id: str
    relation: str
    partition: int


LedgerKey = tuple[Scope, str, str]
"""``(scope, generation, batch_id)``."""


class LedgerCache:
    """A bounded, thread-safe LRU map of visible ledger entries."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[LedgerKey, LedgerEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: LedgerKey) -> LedgerEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: LedgerKey, entry: LedgerEntry) -> None:
        if self._capacity == 0:
            return
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def drop_roots(self, scope: Scope, generation: str, root_ids: frozenset[str]) -> int:
        """Forget every entry of ``scope`` and ``generation`` whose root is listed."""
        with self._lock:
            doomed = [
                key
                for key, entry in self._entries.items()
                if key[0] == scope and key[1] == generation and entry.root_id in root_ids
            ]
            for key in doomed:
                del self._entries[key]
            return len(doomed)

    def __len__(self) -> int:
        return len(self._entries)


class KeyLocks:
    """One mutex per key, created on demand and dropped when no thread holds or waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Hashable, tuple[threading.Lock, list[int]]] = {}

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._lock:
            lock, users = self._held.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users[0] -= 1
                if users[0] == 0:
                    del self._held[key]

    def try_hold(self, key: Hashable) -> Callable[[], None] | None:
        """:meth:`hold` without waiting: the release (call it once, from any thread), or None
        if another holder has ``key``."""
        with self._lock:
            lock, users = self._held.setdefault(key, (threading.Lock(), [0]))
            if not lock.acquire(blocking=False):
                return None  # held, so the entry has a user and stays
            users[0] += 1

        def release() -> None:
            lock.release()
            with self._lock:
                users[0] -= 1
                if users[0] == 0:
                    del self._held[key]

        return release

    def __len__(self) -> int:
        return len(self._held)


class _SharedExclusive:
    """A readers-writer lock that lets a waiting writer in before new readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and self._writers_waiting == 0)
            self._readers += 1

    def try_acquire_shared(self) -> bool:
        """:meth:`acquire_shared` if it would not wait."""
        with self._cond:
            if self._writer or self._writers_waiting:
                return False
            self._readers += 1
            return True

    def release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writer and self._readers == 0)
            self._writers_waiting -= 1
            self._writer = True

    def release_exclusive(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


class ScopeGate:
    """Shared for puts, exclusive for erasures, per ``(scope, generation)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[tuple[Scope, str], tuple[_SharedExclusive, list[int]]] = {}

    @contextmanager
    def shared(self, scope: Scope, generation: str) -> Iterator[None]:
        with self._gate(scope, generation) as gate:
            gate.acquire_shared()
            try:
                yield
            finally:
                gate.release_shared()

    def try_shared(self, scope: Scope, generation: str) -> Callable[[], None] | None:
        """:meth:`shared` without waiting: the release (call it once, from any thread), or None
        if an erasure holds or waits for the gate."""
        key = (scope, generation)
        with self._lock:
            gate, users = self._entry(key)
            if not gate.try_acquire_shared():
                if users[0] == 0:
                    del self._gates[key]
                return None
            users[0] += 1

        def release() -> None:
            gate.release_shared()
            with self._lock:
                users[0] -= 1
                if users[0] == 0:
                    del self._gates[key]

        return release

    @contextmanager
    def exclusive(self, scope: Scope, generation: str) -> Iterator[None]:
        with self._gate(scope, generation) as gate:
            gate.acquire_exclusive()
            try:
                yield
            finally:
                gate.release_exclusive()

    def _entry(self, key: tuple[Scope, str]) -> tuple[_SharedExclusive, list[int]]:
        """The gate of ``key`` and its user count (under ``_lock``): made only when absent
        (every put of a scope shares one; making one per put cost a Condition each)."""
        found = self._gates.get(key)
        if found is None:
            found = self._gates[key] = (_SharedExclusive(), [0])
        return found

    @contextmanager
    def _gate(self, scope: Scope, generation: str) -> Iterator[_SharedExclusive]:
        key = (scope, generation)
        with self._lock:
            gate, users = self._entry(key)
            users[0] += 1
        try:
            yield gate
        finally:
            with self._lock:
                users[0] -= 1
                if users[0] == 0:
                    del self._gates[key]
