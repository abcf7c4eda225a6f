"""The coordinator's read cache ("NVMe cache"): immutable private reads on local disk.

What goes in is immutable by key: value bodies by CID (content addressed) and CAS objects
fetched from the bucket (create-only keys). An entry is therefore never stale, and the cache is
disposable: losing any entry, or the whole directory, changes latency, never an answer.

Layout (``v1`` is the entry format; another format would use another directory)::

    <directory>/v1/<namespace>/<hh>/<sha256(namespace NUL key) hex>    one entry
    <directory>/v1/<namespace>/<hh>/.tmp.<pid>.<random>               a write in progress

An entry file is an 80-byte header and the body::

    magic     8  b"BAMLRC01"
    length    8  body length, unsigned big-endian
    key      32  SHA-256 of namespace NUL key (the file name's digest)
    digest   32  SHA-256 of the body
    body     length bytes

:func:`decode_entry` checks all four against the file and the key it was asked for; anything
else (torn, truncated, padded, flipped, or another key's file) is a miss, and the file is removed.

Writes go to a temp file in the entry's own directory and are renamed over the entry, so a
reader (thread or process) sees the old entry, the new one or none, never half of one. There is
no fsync: after a crash a renamed entry may hold zeros or a torn body, and the header check turns
that into a miss, which costs one refetch. Syncing would slow every fill for nothing a refetch
cannot restore.

Size: each process keeps its own index of entry sizes in least-recently-used order (rebuilt
from the directory, oldest mtime first, when the cache opens; a hit touches the file's mtime so
a restart keeps the order) and evicts the least recently used entries once the total passes
``max_bytes``. Several processes may share one directory: renames are atomic, an entry another
process evicted is a miss, an entry it wrote joins this process's index when read (and the
index evicts down to ``max_bytes`` then); an entry evicted while a thread was reading it is
still that read's hit but does not come back into the index. The directory may briefly hold
more than ``max_bytes`` (each process evicts what it knows of).

I/O failures (the directory deleted under a running cache, no space, no permission) are misses
and skipped writes, counted in :class:`CacheStats`; ``get`` and ``put`` never raise them.

Write-behind: :meth:`ReadCache.put_later` hands the write to the cache's writer thread and
returns at once, so a query that fills the cache does not wait for file creation (a cold query
over 16,000 values spent a third of its time creating entry files). Until the thread has written
it, the body is served from memory; the bodies waiting are bounded (``PENDING_BYTES``), and a
fill past the bound is dropped and counted (the cache is disposable). :meth:`ReadCache.clear`
drops what waits and waits for a write in progress, so nothing queued before it lands after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT_DIR = "v1"
MAGIC = b"BAMLRC01"
HEADER_BYTES = len(MAGIC) + 8 + 32 + 32
NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A namespace is one safe directory name, e.g. ``values`` or ``cas``."""
TEMP_PREFIX = ".tmp."
PENDING_BYTES = 64 << 20
"""Bodies waiting for the writer thread, at most (and at most ``max_bytes``)."""
LIST_AT = 4
"""Keys of one entry directory from which :meth:`ReadCache.get_many` lists it instead of
trying to open each."""
STALE_TEMP_S = 3600.0
"""A temp file older than this when the cache opens was left by a crashed writer: removed."""


def key_digest(namespace: str, key: str) -> bytes:
    """SHA-256 of ``namespace NUL key`` (UTF-8, lone surrogates kept): the entry's identity."""
    return hashlib.sha256(f"{namespace}\0{key}".encode("utf-8", "surrogatepass")).digest()


def encode_entry(digest_of_key: bytes, body: bytes) -> bytes:
    """The bytes of an entry file for ``body`` under the key whose digest is ``digest_of_key``."""
    if len(digest_of_key) != 32:
        raise ValueError(f"a key digest is 32 bytes, got {len(digest_of_key)}")
    length = len(body).to_bytes(8, "big")
    return MAGIC + length + digest_of_key + hashlib.sha256(body).digest() + body


def decode_entry(data: bytes, digest_of_key: bytes) -> bytes | None:
    """The body of entry file ``data`` if it is whole and is the entry of ``digest_of_key``;
    ``None`` for anything else. Never raises."""
    if len(data) < HEADER_BYTES or data[:8] != MAGIC:
        return None
    length = int.from_bytes(data[8:16], "big")
    if len(data) != HEADER_BYTES + length or data[16:48] != digest_of_key:
        return None
    body = data[HEADER_BYTES:]
    if hashlib.sha256(body).digest() != data[48:80]:
        return None
    return body


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since the cache was opened (one process), and what its index holds now."""

    hits: int = 0
    misses: int = 0
    """Every ``get`` that returned ``None``, corrupt entries included."""
    bytes_read_from_cache: int = 0
    """Body bytes returned by hits."""
    evictions: int = 0
    """Entries dropped to stay under ``max_bytes``."""
    corrupt: int = 0
    """Entry files that failed the header check (removed)."""
    write_errors: int = 0
    """``put`` calls that stored nothing because the disk refused."""
    writes_dropped: int = 0
    """``put_later`` bodies not stored because too many bytes were already waiting."""
    pending: int = 0
    """``put_later`` bodies waiting for the writer thread."""
    entries: int = 0
    bytes: int = 0
    """Size of the indexed entry files, headers included."""


class ReadCache:
    """A size-bounded, disposable, content-verified disk cache (see the module doc).

    Thread-safe. ``ReadCache.disabled()`` always misses and stores nothing.
    """

    def __init__(self, directory: Path, max_bytes: int) -> None:
        """Open (or create) the cache in ``directory``; ``ValueError`` if ``max_bytes`` is not a
        non-negative int or the directory cannot be created."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes!r} must be a whole number of bytes >= 0")
        root = directory / FORMAT_DIR
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"read cache directory {directory} cannot be created ({exc}); choose a writable "
                "directory, or run with the cache disabled"
            ) from exc
        self._setup(root, max_bytes)
        self._load_index()
        with self._lock:
            self._evict_locked()

    @classmethod
    def disabled(cls) -> ReadCache:
        """A cache that always misses and stores nothing."""
        cache = cls.__new__(cls)
        cache._setup(None, 0)
        return cache

    def _setup(self, root: Path | None, max_bytes: int) -> None:
        self._root = root
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._index: OrderedDict[str, int] = OrderedDict()
        self._total = 0
        self._epoch = 0
        """Counts index records, so a failed read does not drop an entry indexed meanwhile."""
        self._hits = self._misses = self._bytes_read = 0
        self._evictions = self._corrupt = self._write_errors = 0
        self._pending: OrderedDict[str, tuple[bytes, bytes]] = OrderedDict()
        """Entry name -> (key digest, body) waiting for the writer thread."""
        self._pending_bytes = self._dropped = 0
        self._changed = threading.Condition(self._lock)
        self._writing = threading.Lock()
        """Held by the writer thread around one entry's write (``clear`` waits for it)."""
        self._writer: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self._root is not None

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                bytes_read_from_cache=self._bytes_read,
                evictions=self._evictions,
                corrupt=self._corrupt,
                write_errors=self._write_errors,
                writes_dropped=self._dropped,
                pending=len(self._pending),
                entries=len(self._index),
                bytes=self._total,
            )

    def get(self, namespace: str, key: str) -> bytes | None:
        """The body stored under ``(namespace, key)``, or ``None`` (absent, evicted, corrupt,
        or the directory is gone). ``ValueError`` only for an invalid namespace."""
        digest = key_digest(_valid(namespace), key)
        if self._root is None:
            self._miss()
            return None
        name = _relative(namespace, digest)
        with self._lock:
            waiting = self._pending.get(name)
            if waiting is not None:
                self._hits += 1
                self._bytes_read += len(waiting[1])
                return waiting[1]
        path = self._root / name
        epoch = self._epoch
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read(HEADER_BYTES + self._max_bytes + 1) if size <= self._bound() else b""
        except OSError:
            with self._lock:
                # A put may have renamed and indexed the entry since the open failed: keep it.
                if epoch == self._epoch or not path.exists():
                    self._forget_locked(name)
                self._misses += 1
            return None
        body = decode_entry(data, digest)
        if body is None:
            log.warning("read cache entry %s is corrupt (%d bytes); removed", name, size)
            _unlink(path)
            with self._lock:
                self._corrupt += 1
                self._misses += 1
                self._forget_locked(name)
            return None
        with contextlib.suppress(OSError):  # evicted or replaced meanwhile: order is a hint
            os.utime(path)
        with self._lock:
            self._hits += 1
            self._bytes_read += len(body)
            # Evicted (or cleared) while it was read: this process removes files under the
            # lock, so one that is gone now must not come back into the index, where it would
            # count against the budget with no file behind it. One ``stat``, only for a name
            # the index does not hold (evicted, or written by another process).
            if name in self._index or path.exists():
                self._record_locked(name, len(data))
                self._evict_locked()
        return body

    def get_many(self, namespace: str, keys: Iterable[str]) -> dict[str, bytes]:
        """:meth:`get` of each key, by key (absent keys left out). Where several keys share an
        entry directory, the directory is listed once and only the entries on disk (or waiting
        to be written) are opened: a cold query's misses cost one listing per directory, not
        one failed ``open`` each. Entries other processes wrote are listed, so found, as with
        :meth:`get`. ``ValueError`` only for an invalid namespace."""
        _valid(namespace)
        wanted = list(keys)
        if self._root is None:
            with self._lock:
                self._misses += len(wanted)
            return {}
        by_dir: dict[str, list[tuple[str, str]]] = {}
        for key in wanted:
            name = _relative(namespace, key_digest(namespace, key))
            by_dir.setdefault(name.rpartition("/")[0], []).append((key, name))
        found: dict[str, bytes] = {}
        for directory, items in by_dir.items():
            present: set[str] | None = None
            if len(items) >= LIST_AT:
                try:
                    present = set(os.listdir(self._root / directory))
                except OSError:
                    present = set()
            for key, name in items:
                if present is not None and name.rpartition("/")[2] not in present:
                    with self._lock:
                        if name not in self._pending:
                            self._misses += 1
                            self._forget_locked(name)
                            continue
                body = self.get(namespace, key)
                if body is not None:
                    found[key] = body
        return found

    def put(self, namespace: str, key: str, data: bytes) -> None:
        """Store ``data`` under ``(namespace, key)`` (atomically; see the module doc). A body
        larger than ``max_bytes`` is not stored; disk errors are counted, not raised.
        ``ValueError`` only for an invalid namespace."""
        digest = key_digest(_valid(namespace), key)
        if self._root is None or HEADER_BYTES + len(data) > self._max_bytes:
            return
        self._write(_relative(namespace, digest), digest, data)

    def put_later(self, namespace: str, key: str, data: bytes) -> None:
        """:meth:`put` on the writer thread (see the module doc): returns at once; the body is
        served from memory until it is written. ``ValueError`` only for an invalid namespace."""
        self.put_many_later(namespace, [(key, data)])

    def put_many_later(self, namespace: str, items: Iterable[tuple[str, bytes]]) -> None:
        """:meth:`put_later` of each ``(key, body)``, taking the lock once."""
        _valid(namespace)
        if self._root is None:
            return
        entries = [
            (_relative(namespace, digest), digest, data)
            for key, data in items
            if HEADER_BYTES + len(data) <= self._max_bytes
            for digest in (key_digest(namespace, key),)
        ]
        with self._lock:
            for name, digest, data in entries:
                if name in self._pending:
                    continue
                if self._pending_bytes + len(data) > min(PENDING_BYTES, self._max_bytes):
                    self._dropped += 1
                    continue
                self._pending[name] = (digest, data)
                self._pending_bytes += len(data)
            if self._pending and self._writer is None:
                self._writer = threading.Thread(
                    target=self._drain, name="read-cache-writer", daemon=True
                )
                self._writer.start()
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every ``put_later`` body is written (or dropped); False on timeout."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._pending, timeout)

    def _drain(self) -> None:
        while True:
            with self._lock:
                self._changed.wait_for(lambda: bool(self._pending))
                name, item = next(iter(self._pending.items()))
            with self._writing:
                with self._lock:
                    if self._pending.get(name) is not item:  # cleared meanwhile
                        continue
                self._write(name, *item)
                with self._lock:
                    if self._pending.get(name) is item:
                        del self._pending[name]
                        self._pending_bytes -= len(item[1])
                    self._changed.notify_all()

    def _write(self, name: str, digest: bytes, data: bytes) -> None:
        assert self._root is not None  # reason: callers return early for a disabled cache
        entry = encode_entry(digest, data)
        try:
            _write_atomically(self._root / name, entry)
        except OSError as exc:
            with self._lock:
                self._write_errors += 1
                first = self._write_errors == 1
            (log.warning if first else log.debug)(
                "read cache write of %s failed (%s); continuing without it",
                name,
                type(exc).__name__,
            )
            return
        with self._lock:
            self._record_locked(name, len(entry))
            self._evict_locked()

    def clear(self) -> None:
        """Remove every entry (of every process sharing the directory) and drop the bodies
        waiting to be written; counters are kept. A ``put`` racing it may leave its entry on
        disk, unindexed until the cache is reopened; a ``put_later`` made before it never lands
        after it."""
        if self._root is None:
            return
        with self._writing, self._lock:
            self._pending.clear()
            self._pending_bytes = 0
            self._changed.notify_all()
            shutil.rmtree(self._root, ignore_errors=True)
            self._index.clear()
            self._total = 0
            with contextlib.suppress(OSError):  # the next put recreates it or counts an error
                self._root.mkdir(parents=True, exist_ok=True)

    # --- internals ------------------------------------------------------------------------

    def _bound(self) -> int:
        return HEADER_BYTES + self._max_bytes

    def _miss(self) -> None:
        with self._lock:
            self._misses += 1

    def _forget_locked(self, name: str) -> None:
        size = self._index.pop(name, None)
        if size is not None:
            self._total -= size

    def _record_locked(self, name: str, size: int) -> None:
        self._epoch += 1
        old = self._index.pop(name, None)
        if old is not None:
            self._total -= old
        self._index[name] = size
        self._total += size

    def _evict_locked(self) -> None:
        if self._root is None:
            return
        while self._total > self._max_bytes and self._index:
            name, size = self._index.popitem(last=False)
            self._total -= size
            self._evictions += 1
            _unlink(self._root / name)

    def _load_index(self) -> None:
        """Index the entries already on disk, least recently used first; remove stale temps."""
        if self._root is None:
            return
        found: list[tuple[float, str, int]] = []
        stale_before = time.time() - STALE_TEMP_S
        for dirpath, _dirs, files in os.walk(self._root):
            for file in files:
                path = Path(dirpath, file)
                try:
                    stat = path.stat()
                except OSError:
                    continue
                if file.startswith(TEMP_PREFIX):
                    if stat.st_mtime < stale_before:
                        _unlink(path)
                    continue
                found.append((stat.st_mtime, path.relative_to(self._root).as_posix(), stat.st_size))
        found.sort()
        with self._lock:
            for _mtime, name, size in found:
                self._record_locked(name, size)


def cached(cache: ReadCache, namespace: str, key: str, fetch: Callable[[], bytes]) -> bytes:
    """The body under ``(namespace, key)`` from ``cache``, else ``fetch()`` stored and returned.

    Only for immutable keys (a CID, a create-only object key): a stored body is never checked
    against the source again. ``fetch``'s errors propagate and nothing is stored.
    """
    body = cache.get(namespace, key)
    if body is None:
        body = fetch()
        cache.put(namespace, key, body)
    return body


def _valid(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise ValueError(
            f"cache namespace {namespace!r} must be 1-64 characters of a-z 0-9 _ -, starting "
            "with a letter or digit (e.g. 'values', 'cas')"
        )
    return namespace


def _relative(namespace: str, digest: bytes) -> str:
    hexed = digest.hex()
    return f"{namespace}/{hexed[:2]}/{hexed}"


def _write_atomically(path: Path, entry: bytes) -> None:
    """Temp file in ``path``'s directory, then rename over ``path`` (no fsync: disposable)."""
    for attempt in (1, 2):
        tmp = path.with_name(f"{TEMP_PREFIX}{os.getpid()}.{secrets.token_hex(6)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:
            if attempt == 2:
                raise
            path.parent.mkdir(parents=True, exist_ok=True)  # new, or removed under us
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(entry)
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        return


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):  # already gone (another process, an rm -rf): done
        path.unlink()
