"""Paths and file names of the profiles-v1 store (reference facts §1).

::

    .baml/
      .gitignore                     ensured to hold a standalone "*" line
      profiles-v1.lock               lease: shared per open writer/reader call, exclusive for clean
      profiles-v1/                   the root
        publish.lock  usage.state  tmp/<uuid4 hex>.pending  tmp/usage-state.pending
        streams/<euid hex32>/{stream.lock, meta/<seq:020>.bamlmeta, data/<seq:020>.bamldata}
        cas/sha256/<2 hex>/<64 hex>.bamlvalue
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path

from baml_studio.format.cas import cas_relpath
from baml_studio.store.config import BAML_DIR_NAME

U64_MAX = (1 << 64) - 1
SEQUENCE_DIGITS = 20
PENDING_SUFFIX = ".pending"

_STREAM_DIR = re.compile(r"[0-9a-f]{32}")
_DIGITS = re.compile(r"[0-9]{20}")


class Plane(enum.Enum):
    """The two sequence spaces of a stream."""

    META = "meta"
    DATA = "data"

    @property
    def ext(self) -> str:
        return "bamlmeta" if self is Plane.META else "bamldata"


def segment_name(plane: Plane, sequence: int) -> str:
    """``{sequence:020}.{ext}``, e.g. ``00000000000000000001.bamlmeta``."""
    if not 1 <= sequence <= U64_MAX:
        raise ValueError(f"segment sequence must be in 1..2**64-1, got {sequence}")
    return f"{sequence:0{SEQUENCE_DIGITS}d}.{plane.ext}"


def parse_segment_name(plane: Plane, name: str) -> int | None:
    """The sequence of a well-formed segment name (a 20-ASCII-digit stem, 1..2**64-1), else None."""
    stem, dot, ext = name.partition(".")
    if not dot or ext != plane.ext or not _DIGITS.fullmatch(stem):
        return None
    sequence = int(stem)
    return sequence if 1 <= sequence <= U64_MAX else None


def parse_stream_dir_name(name: str) -> bytes | None:
    """The euid of a stream directory (exactly 32 lowercase hex characters), else None."""
    return bytes.fromhex(name) if _STREAM_DIR.fullmatch(name) else None


def parse_cas_file_name(name: str) -> bytes | None:
    """The CID of ``<64 lowercase hex>.bamlvalue``, else None. Called for every file a CAS
    listing finds, so no regular expression: the length and suffix, then the hex
    (property-tested against the pattern)."""
    if len(name) != 74 or not name.endswith(".bamlvalue"):
        return None
    digits = name[:64]
    if not digits.isascii() or digits.lower() != digits:
        return None
    try:
        cid = bytes.fromhex(digits)
    except ValueError:
        return None
    return cid if len(cid) == 32 else None  # fromhex skips spaces between pairs


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """Every path of one store, derived from its root (the ``profiles-v1`` directory)."""

    root: Path

    @property
    def lease_lock(self) -> Path:
        """The sibling ``<root name>.lock`` (``.baml/profiles-v1.lock`` by default)."""
        return self.root.parent / f"{self.root.name}.lock"

    @property
    def publish_lock(self) -> Path:
        return self.root / "publish.lock"

    @property
    def usage_state(self) -> Path:
        return self.root / "usage.state"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def usage_pending(self) -> Path:
        return self.tmp_dir / "usage-state.pending"

    @property
    def streams_dir(self) -> Path:
        return self.root / "streams"

    @property
    def cas_dir(self) -> Path:
        return self.root / "cas" / "sha256"

    def new_tmp_path(self) -> Path:
        """A fresh ``tmp/<uuid4 hex>.pending``."""
        return Path(self.new_tmp_names(1)[0])

    def new_tmp_names(self, count: int) -> list[str]:
        """``count`` fresh ``tmp/<uuid4 hex>.pending`` paths as strings, from one random read
        (a group commit's temp files: no ``Path`` and no ``uuid.UUID`` built per file)."""
        tmp = f"{os.fspath(self.root)}/tmp/"
        return [f"{tmp}{name}{PENDING_SUFFIX}" for name in uuid4_hexes(count)]

    def is_store(self) -> bool:
        """The root holds something of a store (``streams/``, ``cas/``, ``usage.state`` or
        ``publish.lock``): a reader pointed at any other directory (``--store /etc``, a typo
        that names a real directory) says so instead of answering with an empty store."""
        names = ("streams", "cas", "usage.state", "publish.lock")
        return any((self.root / name).exists() for name in names)

    def stream_dir(self, euid: bytes) -> Path:
        if len(euid) != 16:
            raise ValueError(f"a process euid is 16 bytes, got {len(euid)}")
        return self.streams_dir / euid.hex()

    def stream_lock(self, euid: bytes) -> Path:
        return self.stream_dir(euid) / "stream.lock"

    def plane_dir(self, euid: bytes, plane: Plane) -> Path:
        return self.stream_dir(euid) / plane.value

    def segment_path(self, euid: bytes, plane: Plane, sequence: int) -> Path:
        return self.plane_dir(euid, plane) / segment_name(plane, sequence)

    def cas_path(self, cid: bytes) -> Path:
        """``cas/sha256/<2 hex>/<64 hex>.bamlvalue``."""
        return self.root / cas_relpath(cid)

    def cas_path_str(self, cid: bytes) -> str:
        """:meth:`cas_path` as a string (the group commit's hot path)."""
        return f"{os.fspath(self.root)}/{cas_relpath(cid)}"


_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (0x4000 << 64) | (0x8000 << 48)


def uuid4_hexes(count: int) -> list[str]:
    """``count`` random version-4 UUIDs in their 32-hex simple form (``uuid.uuid4().hex``),
    from one ``os.urandom`` read."""
    raw = os.urandom(16 * count)
    return [
        f"{(int.from_bytes(raw[i : i + 16], 'big') & _V4_CLEAR) | _V4_SET:032x}"
        for i in range(0, 16 * count, 16)
    ]


def ensure_gitignore(root: Path) -> bool:
    """Make ``.baml/.gitignore`` hold a standalone ``*`` line; only when root's parent is ``.baml``.

    Creates the file or appends the line (after a newline if the file does not end with one).
    Returns True if the file was written. Raises OSError.
    """
    if root.parent.name != BAML_DIR_NAME:
        return False
    path = root.parent / ".gitignore"
    try:
        existing = path.read_bytes()
    except FileNotFoundError:
        existing = b""
    if any(line.rstrip(b"\r \t") == b"*" for line in existing.splitlines()):
        return False
    prefix = b"\n" if existing and not existing.endswith(b"\n") else b""
    with path.open("ab") as handle:
        handle.write(prefix + b"*\n")
    return True
