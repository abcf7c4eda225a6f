"""The publisher's only state: files under the store root, each written atomically.

::

    <root>/publish/<euid hex32>.cursor    {"data":D,"meta":M,"version":1}: every sequence <= M
                                          (meta) and <= D (data) of the stream is shipped or
                                          deliberately skipped
    <root>/publish/inflight.json          the packs of a flush not yet complete (flush ids and
                                          member CIDs), so a retry rebuilds byte-identical packs
    <root>/publish/tmp/                   staging for the two files above
    <root>/cas/sha256/<2>/<64>.bamlvalue.shipped   empty marker beside a shipped value or table

Writes go to ``publish/tmp/<uuid>``, are fsynced, renamed and the directory fsynced. A missing
cursor is ``(0, 0)``; a malformed one raises :class:`StateCorrupt` (never guessed).
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baml_studio.publisher.errors import PublisherError
from baml_studio.store.layout import StoreLayout

SHIPPED_SUFFIX = ".shipped"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class StateCorrupt(PublisherError):
    """A cursor or journal file that does not parse; move it aside to re-ship the stream."""


@dataclass(frozen=True, slots=True)
class Cursor:
    meta: int = 0
    data: int = 0


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
    return value_path.with_name(value_path.name + SHIPPED_SUFFIX)


class PublishState:
    """Cursor, journal and markers of one store."""

    def __init__(self, root: Path) -> None:
        self.layout = StoreLayout(Path(root))
        self.dir = self.layout.root / "publish"

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

    def is_shipped(self, cid: bytes) -> bool:
        return marker_path(self.layout.cas_path(cid)).exists()

    def mark_shipped(self, cids: list[bytes]) -> None:
        """Create the empty markers, then fsync each touched directory once."""
        touched: set[Path] = set()
        for cid in cids:
            path = marker_path(self.layout.cas_path(cid))
            if not path.parent.is_dir():
                continue  # the value was removed meanwhile; nothing left to mark
            with open(path, "ab"):
                pass
            touched.add(path.parent)
        for directory in touched:
            _fsync_dir(directory)

    def _read_json(self, path: Path) -> Any:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise StateCorrupt(f"{path} is not JSON: {exc}") from exc

    def _write_json(self, path: Path, body: Any) -> None:
        tmp_dir = self.dir / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{uuid.uuid4().hex}.pending"
        data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(self.dir)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
