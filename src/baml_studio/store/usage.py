"""The ``usage.state`` byte-accounting ledger (``BAMLUSE1``) and the physical usage scan.

``usage.state`` is 48 bytes: ``b"BAMLUSE1" ‖ usage u64 BE ‖ SHA-256(first 16 bytes)``.
Physical usage is the size of every regular file under the root except ``publish.lock``,
``usage.state`` and ``tmp/usage-state.pending``, plus 48. The ledger is only rewritten under
``publish.lock``, through ``tmp/usage-state.pending`` → fsync → rename → fsync of the root.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from baml_studio.format.errors import (
    EncodeError,
    InvalidChecksum,
    InvalidMagic,
    TrailingBytes,
    Truncated,
)
from baml_studio.store.errors import UsageScanError
from baml_studio.store.fsops import FileSystem, discard, write_file_durably
from baml_studio.store.layout import U64_MAX, StoreLayout

USAGE_MAGIC = b"BAMLUSE1"
USAGE_STATE_BYTES = 8 + 8 + 32


def encode_usage_state(usage: int) -> bytes:
    """The 48-byte ledger for ``usage`` bytes."""
    if not 0 <= usage <= U64_MAX:
        raise EncodeError(f"usage must fit in u64, got {usage}")
    head = USAGE_MAGIC + usage.to_bytes(8, "big")
    return head + hashlib.sha256(head).digest()


def decode_usage_state(raw: bytes) -> int:
    """The usage recorded in a ledger.

    Raises Truncated (under 48 bytes), TrailingBytes (over 48), InvalidMagic or InvalidChecksum.
    """
    if len(raw) < USAGE_STATE_BYTES:
        raise Truncated(f"usage.state is {len(raw)} bytes, expected {USAGE_STATE_BYTES}")
    if len(raw) > USAGE_STATE_BYTES:
        raise TrailingBytes(f"usage.state is {len(raw)} bytes, expected {USAGE_STATE_BYTES}")
    if raw[:8] != USAGE_MAGIC:
        raise InvalidMagic(f"usage.state magic is {raw[:8]!r}, expected {USAGE_MAGIC!r}")
    if hashlib.sha256(raw[:16]).digest() != raw[16:]:
        raise InvalidChecksum("usage.state checksum does not match its first 16 bytes")
    return int.from_bytes(raw[8:16], "big")


def scan_physical_usage(layout: StoreLayout) -> int:
    """Sum of regular file sizes under the root (minus the three excluded files), plus 48.

    Raises UsageScanError for a symlink or any non-regular file, OSError for I/O failures.
    A missing root counts as empty.
    """
    excluded = {layout.publish_lock, layout.usage_state, layout.usage_pending}
    total = USAGE_STATE_BYTES
    pending = [layout.root]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                raise UsageScanError(path, "symlink")
            if entry.is_dir(follow_symlinks=False):
                pending.append(path)
            elif entry.is_file(follow_symlinks=False):
                if path not in excluded:
                    total += _size(entry)
            else:
                raise UsageScanError(path, "non-regular file")
    return total


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0


def read_usage_state(layout: StoreLayout) -> int | None:
    """The ledger's usage, or None if ``usage.state`` does not exist.

    Raises the decode errors of :func:`decode_usage_state` and OSError.
    """
    try:
        raw = layout.usage_state.read_bytes()
    except FileNotFoundError:
        return None
    return decode_usage_state(raw)


def write_usage_state(fs: FileSystem, layout: StoreLayout, usage: int) -> None:
    """Atomically replace the ledger. Raises OSError; before the rename the old one survives."""
    data = encode_usage_state(usage)
    discard(fs, layout.usage_pending)  # a leftover from a crash would make create_new fail
    write_file_durably(fs, layout.usage_pending, data)
    try:
        fs.rename(layout.usage_pending, layout.usage_state)
    except BaseException:
        discard(fs, layout.usage_pending)
        raise
    fs.fsync_dir(layout.root)
