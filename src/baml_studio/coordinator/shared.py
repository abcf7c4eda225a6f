"""In-process caches a coordinator shares across queries; all hold immutable data only.

* :class:`DatasetCache`: opened Lance datasets by (store, name, version). A version never
  changes, and reusing the object keeps Lance's index and metadata caches warm (opening anew
  per query reloads the BTREE pages each time).
* :class:`MarkerCache`: the execution ids marked in ``projected_v1`` at a version (read once).
* :class:`ValueLru`: value bodies by CID (content addressed), bounded by bytes, in front of the
  disk read cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from baml_studio.projector.lance_store import PROJECTED, PrivateStore
from baml_studio.query.values import DecodedValues


class DatasetCache:
    def __init__(self, max_entries: int = 64) -> None:
        self._max = max_entries
        self._entries: OrderedDict[tuple[int, str, int | None], Any] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, store: PrivateStore, name: str, version: int | None) -> Any:
        """``store.open_dataset(name, version=version)``, reused when ``version`` is given."""
        if version is None:
            return store.open_dataset(name)
        key = (id(store), name, version)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        dataset = store.open_dataset(name, version=version)
        if dataset is not None:
            with self._lock:
                self._entries[key] = dataset
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return dataset


class MarkerCache:
    def __init__(self, max_versions: int = 4) -> None:
        self._max = max_versions
        self._entries: OrderedDict[tuple[int, int], frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def marked(
        self, store: PrivateStore, version: int, read: Callable[[], frozenset[str]]
    ) -> frozenset[str]:
        """Every execution id marked at ``version`` of ``store``'s ``projected_v1``."""
        key = (id(store), version)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        found = read()
        with self._lock:
            self._entries[key] = found
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return found


class ValueLru:
    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self._max = max_bytes
        self._size = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cid: bytes) -> bytes | None:
        with self._lock:
            body = self._entries.get(cid)
            if body is not None:
                self._entries.move_to_end(cid)
            return body

    def put(self, cid: bytes, body: bytes) -> None:
        if len(body) > self._max // 8:
            return
        with self._lock:
            if cid in self._entries:
                return
            self._entries[cid] = body
            self._size += len(body)
            while self._size > self._max:
                _, old = self._entries.popitem(last=False)
                self._size -= len(old)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0


class SharedCaches:
    def __init__(self, decoded_entries: int = 100_000) -> None:
        self.datasets = DatasetCache()
        self.markers = MarkerCache()
        self.values = ValueLru()
        self.decoded = DecodedValues(max_entries=decoded_entries)
        """Decoded values by CID, so a repeated query does not decode its bodies again."""


__all__ = ["PROJECTED", "DatasetCache", "MarkerCache", "SharedCaches", "ValueLru"]
