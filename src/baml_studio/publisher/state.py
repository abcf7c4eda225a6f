"""The publisher's only state: files under the store root, each written atomically.

::

    <root>/publish/<euid hex32>.cursor    {"data":D,"meta":M,"version":1}: every sequence <= M
                                          (meta) and <= D (data) of the stream is shipped or
                                          deliberately skipped
    <root>/publish/inflight.json          the packs of a flush not yet complete (flush ids and
                                          member CIDs), so a retry rebuilds byte-identical packs
    <root>/publish/shipped.log            the shipped ledger: ``<cid hex> <shipped_at>`` lines,
                                          appended once per flush with one fsync
    <root>/publish/tmp/                   staging for cursors, the journal and ledger compaction

Writes go to ``publish/tmp/<uuid>``, are fsynced, renamed and the directory fsynced. A missing
cursor is ``(0, 0)``; a malformed one raises :class:`StateCorrupt` (never guessed). A ledger line
that does not parse (a crash mid-append leaves a truncated last line) is ignored with a
:class:`LedgerDamaged` warning: its value counts as unshipped, is shipped again and the gateway
answers ``stored``. Empty ``<cid>.bamlvalue.shipped`` markers of older versions are folded into
the ledger (with their modification time) and removed the first time the ledger is loaded.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import uuid
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.jsontext import parse_json
from baml_studio.publisher.errors import PublisherError
from baml_studio.store.layout import StoreLayout, parse_cas_file_name

SHIPPED_SUFFIX = ".shipped"
"""Suffix of the legacy per-value markers, read only to migrate them into the ledger."""
LEDGER_NAME = "shipped.log"
COMPACT_MIN_LINES = 4096
"""The ledger is rewritten once it has more than this many lines and twice its live entries."""
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class StateCorrupt(PublisherError):
    """A cursor or journal file that does not parse; move it aside to re-ship the stream."""


class LedgerDamaged(UserWarning):
    """A shipped-ledger line that does not parse; its value is shipped again (``stored``)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    meta: int = 0
    data: int = 0


@dataclass(slots=True)
class CasScanCache:
    """The CAS shard directories whose every file was in the shipped ledger when last listed,
    with the ``(st_ino, st_mtime_ns)`` each had before that listing. A directory still at its
    mark has gained no file since (creating or renaming an entry moves a directory's mtime),
    so the scan skips it; ledger additions keep that true, a possible loss of entries
    (``ledger_losses`` moved) forgets every mark, and a full listing runs every
    ``collect_cas.FULL_SCAN_SECONDS`` whatever the marks say."""

    marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    ledger_losses: int = -1
    full_at: float = float("-inf")
    """``time.monotonic()`` of the last full listing."""


@dataclass(frozen=True, slots=True)
class JournalPack:
    flush_id: str
    members: tuple[bytes, ...]


def new_ulid(now: float | None = None) -> str:
    """A ULID: 48-bit milliseconds and 80 random bits in Crockford base32 (26 characters)."""
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (millis << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def marker_path(value_path: Path) -> Path:
    """The legacy marker beside a value (migration only)."""
    return value_path.with_name(value_path.name + SHIPPED_SUFFIX)


class PublishState:
    """Cursors, journal and shipped ledger of one store; safe to share between threads."""

    def __init__(self, root: Path) -> None:
        self.layout = StoreLayout(Path(root))
        self.dir = self.layout.root / "publish"
        self._lock = threading.RLock()
        self._shipped: dict[bytes, int] = {}
        self._lines = 0
        self._seen: tuple[int, int] | None = None
        """(inode, size) of the ledger as last read or written; another value means reload."""
        self._open_tail = False
        """The ledger ends without a newline (a torn append): the next write rewrites it."""
        self._migrated = False
        self.ledger_losses = 0
        """How many times entries may have left the ledger (a load, a reload after another
        process wrote it, ``forget_shipped``): a file shipped before may be unshipped now."""
        self.cas_scan = CasScanCache()
        """What the CAS scan remembers between flushes (see ``collect_cas``)."""

    def cursor_path(self, euid: bytes) -> Path:
        return self.dir / f"{euid.hex()}.cursor"

    def read_cursor(self, euid: bytes) -> Cursor:
        data = self._read_json(self.cursor_path(euid))
        if data is None:
            return Cursor()
        if not (isinstance(data, dict) and data.get("version") == 1):
            raise StateCorrupt(f"{self.cursor_path(euid)} is not a version-1 cursor")
        meta, dat = data.get("meta"), data.get("data")
        if not (isinstance(meta, int) and isinstance(dat, int) and meta >= 0 and dat >= 0):
            raise StateCorrupt(f"{self.cursor_path(euid)} holds bad sequences {meta!r}, {dat!r}")
        return Cursor(meta, dat)

    def write_cursor(self, euid: bytes, cursor: Cursor) -> None:
        body = {"data": cursor.data, "meta": cursor.meta, "version": 1}
        self._write_json(self.cursor_path(euid), body)

    @property
    def journal_path(self) -> Path:
        return self.dir / "inflight.json"

    def read_journal(self) -> list[JournalPack]:
        data = self._read_json(self.journal_path)
        if data is None:
            return []
        try:
            return [
                JournalPack(str(p["flush_id"]), tuple(bytes.fromhex(c) for c in p["members"]))
                for p in data["packs"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise StateCorrupt(f"{self.journal_path} is malformed: {exc}") from exc

    def write_journal(self, packs: list[JournalPack]) -> None:
        if not packs:
            self.clear_journal()
            return
        rows = [{"flush_id": p.flush_id, "members": [c.hex() for c in p.members]} for p in packs]
        self._write_json(self.journal_path, {"packs": rows, "version": 1})

    def clear_journal(self) -> None:
        try:
            self.journal_path.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(self.dir)

    @property
    def ledger_path(self) -> Path:
        return self.dir / LEDGER_NAME

    def is_shipped(self, cid: bytes) -> bool:
        with self._lock:
            return cid in self._current()

    def shipped(self) -> dict[bytes, int]:
        """A snapshot of the ledger: CID → shipped_at (unix seconds)."""
        with self._lock:
            return dict(self._current())

    def mark_shipped(self, cids: Iterable[bytes], *, now: float | None = None) -> None:
        """Append the CIDs not yet in the ledger with ``now``, then fsync the ledger once."""
        with self._lock:
            current = self._current()
            at = int(time.time() if now is None else now)
            self._add({c: at for c in cids if c not in current})

    def _add(self, fresh: dict[bytes, int]) -> None:
        if not fresh:
            return
        self._shipped.update(fresh)
        self._lines += len(fresh)
        if self._open_tail or self._lines > max(COMPACT_MIN_LINES, 2 * len(self._shipped)):
            self._rewrite_ledger()  # also drops a torn last line before anything follows it
        else:
            self._append("".join(f"{c.hex()} {at}\n" for c, at in fresh.items()))

    def forget_shipped(self, cids: Iterable[bytes]) -> None:
        """Drop ledger entries (their files are gone) by rewriting the ledger atomically."""
        with self._lock:
            current = self._current()
            gone = [c for c in cids if c in current]
            if not gone:
                return
            for cid in gone:
                del current[cid]
            self.ledger_losses += 1
            self._rewrite_ledger()

    def _current(self) -> dict[bytes, int]:
        if not self._migrated:
            self._migrated = True
            self._load()
            self._migrate_markers()
        elif self._stat() != self._seen:
            self._load()
        return self._shipped

    def _stat(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.ledger_path)
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_size

    def _load(self) -> None:
        self._shipped, self._lines, self._open_tail = {}, 0, False
        self.ledger_losses += 1
        self._seen = self._stat()  # before reading: an append meanwhile means reload next time
        try:
            raw = self.ledger_path.read_bytes()
        except FileNotFoundError:
            return
        rows = raw.split(b"\n")
        self._open_tail = rows[-1] != b""
        for number, row in enumerate(rows[:-1] if not self._open_tail else rows, start=1):
            if not row:
                continue
            self._lines += 1
            entry = _parse_line(row)
            if entry is None:
                torn = self._open_tail and number == len(rows)
                reason = "a truncated last line" if torn else f"line {number} does not parse"
                warnings.warn(
                    LedgerDamaged(f"{self.ledger_path}: {reason} ({row[:80]!r}); ignored, "
                                  "its value is shipped again and answers stored"),
                    stacklevel=4,
                )  # fmt: skip
                continue
            self._shipped.setdefault(entry[0], entry[1])

    def _migrate_markers(self) -> None:
        found: dict[bytes, int] = {}
        markers: list[Path] = []
        try:
            prefixes = os.listdir(self.layout.cas_dir)
        except FileNotFoundError:
            return
        for prefix in prefixes:
            directory = self.layout.cas_dir / prefix
            try:
                names = os.listdir(directory)
            except (NotADirectoryError, FileNotFoundError):
                continue
            for name in names:
                if not name.endswith(SHIPPED_SUFFIX):
                    continue  # a value, not a legacy marker: most names
                cid = parse_cas_file_name(name.removesuffix(SHIPPED_SUFFIX))
                if cid is not None:
                    try:
                        found[cid] = int((directory / name).stat().st_mtime)
                    except FileNotFoundError:
                        continue
                    markers.append(directory / name)
        self._add({c: at for c, at in sorted(found.items()) if c not in self._shipped})
        for marker in markers:  # only once the ledger holding them is durable
            marker.unlink(missing_ok=True)
        for directory in {m.parent for m in markers}:
            _fsync_dir(directory)

    def _append(self, text: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        created = not self.ledger_path.exists()
        fd = os.open(self.ledger_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, text.encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.dir)
        self._seen = self._stat()

    def _rewrite_ledger(self) -> None:
        rows = sorted(self._shipped.items(), key=lambda item: (item[1], item[0]))
        text = "".join(f"{cid.hex()} {at}\n" for cid, at in rows)
        self._write_bytes(self.ledger_path, text.encode("ascii"))
        self._lines, self._open_tail, self._seen = len(rows), False, self._stat()

    def _read_json(self, path: Path) -> Any:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        return parse_json(raw, lambda reason: StateCorrupt(f"{path} is not JSON: {reason}"))

    def _write_json(self, path: Path, body: Any) -> None:
        self._write_bytes(path, json.dumps(body, sort_keys=True, separators=(",", ":")).encode())

    def _write_bytes(self, path: Path, data: bytes) -> None:
        tmp_dir = self.dir / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{uuid.uuid4().hex}.pending"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(self.dir)


def _parse_line(row: bytes) -> tuple[bytes, int] | None:
    parts = row.split(b" ")
    if len(parts) != 2 or len(parts[0]) != 64 or not parts[1].isdigit():
        return None
    try:
        return bytes.fromhex(parts[0].decode("ascii")), int(parts[1])
    except ValueError:
        return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
