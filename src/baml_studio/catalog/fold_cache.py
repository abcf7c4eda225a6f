"""A bounded LRU of folded executions, shared by the sources of successive snapshots.

Keyed by what the fold of an execution depends on: its id, the data range folded, whether
RootEnded was seen (the reference's ``(execution_id, data_first, data_last, ended?)``), plus
its status and index state, which can change without new data (a process dying turns
``running`` into ``abandoned``; a lost meta segment makes ``index_corrupt``). Sized by the
tables' approximate Arrow bytes; an entry larger than the whole budget is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

DEFAULT_MAX_FOLD_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FoldKey:
    execution_id: str
    data_first: int
    data_last: int
    ended: bool
    status: str
    index_state: str


class FoldCache:
    """Thread-safe LRU of ``FoldKey -> {relation: table}``, bounded by approximate bytes."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_FOLD_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[FoldKey, tuple[Mapping[str, pa.Table], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: FoldKey) -> Mapping[str, pa.Table] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: FoldKey, tables: Mapping[str, pa.Table], size: int | None = None) -> None:
        """Keep ``tables`` under ``key``; ``size`` is their approximate bytes (default: the
        sum of their buffers, which over-counts slices of a larger table)."""
        if size is None:
            size = sum(t.get_total_buffer_size() for t in tables.values())
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (tables, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted
