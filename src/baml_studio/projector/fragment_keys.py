"""Which keys a Lance dataset holds, answered from the keys of its fragments, remembered.

A Lance fragment never changes once written: a deletion gives it a new deletion file,
compaction and updates write new fragments (new data files). So the distinct values of a key
column, read once per fragment *identity* (its data files and its deletion file), answer "is
this key in the dataset?" for every later version that still lists that identity, without a
scan. :class:`FragmentKeys` keeps those sets for the fragments read last (LRU, at most
``max_keys`` keys in all); a fragment it does not hold (new, evicted, or alone larger than the
budget) is read and remembered, or, when it does not fit, filtered by a Lance scan as before.

Why: the projector asks this for every slice of executions (are their values in
``values_v1``?) and every write (which cids already have ``value_paths_v1`` rows, which row ids
are already in a relation's dataset). A filtered Lance scan reads the key column of every
fragment again for each chunk of 1,000 keys, so its cost grew with the dataset: 0.24 s a slice
at 88,000 values in 63 fragments (the 100,000-call arrival replay, ``docs/benchmarks.md``).

The answer is exact for the version given: the fragments it lists are exactly the ones
consulted. Memory: about 150 bytes a remembered key (a Python ``str`` in a ``frozenset``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import lance

Identity = tuple[str, str, tuple[str, ...], tuple[object, ...] | None]
"""(dataset URI, column, data file paths, deletion file) of one fragment."""

ScanFragments = Callable[
    [lance.LanceDataset, Sequence[lance.LanceFragment], str, set[str]], set[str]
]
"""``(ds, fragments, column, keys)``: the keys found in those fragments by a filtered scan."""


def identity(uri: str, column: str, fragment: lance.LanceFragment) -> Identity:
    meta = fragment.metadata
    d = meta.deletion_file
    deletion = None if d is None else (d.read_version, d.id, str(d.file_type), d.num_deleted_rows)
    return (uri, column, tuple(f.path for f in meta.files), deletion)


class FragmentKeys:
    """Distinct key values per fragment identity (module docstring). Thread-safe."""

    def __init__(self, max_keys: int = 1_000_000) -> None:
        if max_keys < 0:
            raise ValueError(f"max_keys must be >= 0, got {max_keys}")
        self.max_keys = max_keys
        self._sets: OrderedDict[Identity, frozenset[str]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.reads = 0
        """Fragments read into the cache (for tests and benchmarks)."""
        self.scanned = 0
        """Fragments left to a filtered scan because they do not fit."""

    def present(
        self, ds: lance.LanceDataset, column: str, keys: Iterable[str], scan: ScanFragments
    ) -> set[str]:
        """The keys of ``keys`` that version ``ds`` holds in ``column``."""
        remaining = set(keys)
        found: set[str] = set()
        if not remaining:
            return found
        uncached: list[lance.LanceFragment] = []
        for fragment in ds.get_fragments():
            values = self._values(ds.uri, column, fragment)
            if values is None:
                uncached.append(fragment)
                continue
            hit = remaining.intersection(values)
            if hit:
                found |= hit
                remaining -= hit
                if not remaining:
                    return found
        if uncached:
            self.scanned += len(uncached)
            found |= scan(ds, uncached, column, remaining)
        return found

    def _values(
        self, uri: str, column: str, fragment: lance.LanceFragment
    ) -> frozenset[str] | None:
        ident = identity(uri, column, fragment)
        with self._lock:
            values = self._sets.get(ident)
            if values is not None:
                self._sets.move_to_end(ident)
                return values
        if fragment.metadata.physical_rows > self.max_keys:
            return None
        values = frozenset(fragment.to_table(columns=[column])[column].to_pylist())
        with self._lock:
            self.reads += 1
            if ident not in self._sets:
                self._sets[ident] = values
                self._held += len(values)
                while self._held > self.max_keys and self._sets:
                    _, evicted = self._sets.popitem(last=False)
                    self._held -= len(evicted)
        return values

    def __len__(self) -> int:
        """Keys held."""
        with self._lock:
            return self._held
