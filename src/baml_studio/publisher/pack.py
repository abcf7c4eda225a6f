"""Value packs (``BAMLPCK1``): the small values of one flush in one zstd frame.

The decompressed pack is::

    BAMLPCK1 ‖ u16 version (=1) ‖ u32 manifest_len ‖ manifest ‖ entry files, concatenated

All integers are big-endian. ``manifest`` is canonical JSON (UTF-8, ASCII-only, keys sorted, no
whitespace)::

    {"entries":[{"cid":"<64 hex>","codec":1,"length":N,"offset":O,"sha256":"<64 hex>"},...],
     "version":1}

Entries are sorted by CID with no duplicates; ``offset`` counts from the first byte after the
manifest, the first entry is at 0 and each next one starts where the previous ended; the last
ends at the end of the pack. Each entry is a whole ``.bamlvalue`` CAS file exactly as the local
store holds it (header, body and trailing SHA-256) and ``sha256`` is the SHA-256 of that file.
Only codec 1 (values) travels in packs; function tables ship as their own objects. The whole
pack is ONE zstd frame that records its content size. ``docs/formats.md`` ("Value packs") has
golden vectors.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zstandard

from baml_studio.format.cas import CAS_MAGIC, CODEC_VALUE, CasObject, decode_cas_object
from baml_studio.format.errors import SegmentReadError
from baml_studio.jsontext import parse_json
from baml_studio.publisher.config import DEFAULT_ZSTD_LEVEL
from baml_studio.publisher.errors import (
    PackBadMagic,
    PackEntryInvalid,
    PackFrameInvalid,
    PackManifestInvalid,
    PackTruncated,
    PackUnsupportedVersion,
)

PACK_MAGIC = b"BAMLPCK1"
PACK_VERSION = 1
MAX_PACK_ENTRIES = 100_000
"""openapi.yaml's ``ValuePackUploadObject.entry_count`` maximum."""
DEFAULT_MAX_PACK_BYTES = 1 << 30
"""The decoder refuses a frame that declares more decompressed bytes than this."""

_HEAD = struct.Struct(">8sHI")
_CAS_HEAD = struct.Struct(">8sHHQ32s")
_HEX64 = frozenset("0123456789abcdef")
_ENTRY_KEYS = frozenset({"cid", "codec", "length", "offset", "sha256"})


@dataclass(frozen=True, slots=True)
class PackEntry:
    """One value in a pack: its CAS file and what the manifest says about it."""

    cid: bytes
    codec: int
    raw: bytes
    """The whole ``.bamlvalue`` file."""
    sha256: str
    """SHA-256 of ``raw``, 64 lowercase hex."""
    body: bytes
    """The value's body, as ``raw`` holds it (verified with the pack: its CID is ``cid``)."""

    def decode(self) -> CasObject:
        """The CAS object of ``raw``, verified when the pack was (not decoded again)."""
        return CasObject(self.codec, self.cid, self.body)


@dataclass(frozen=True, slots=True)
class Pack:
    version: int
    entries: tuple[PackEntry, ...]


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def pack_body(values: Sequence[bytes]) -> bytes:
    """The uncompressed pack for whole ``.bamlvalue`` files (duplicates collapse).

    Raises PackEntryInvalid for a file that is not a codec-1 CAS object or for no values.
    """
    by_cid: dict[bytes, bytes] = {}
    for raw in values:
        by_cid.setdefault(_entry_cid(raw), raw)
    if not 1 <= len(by_cid) <= MAX_PACK_ENTRIES:
        raise PackEntryInvalid(f"a pack holds 1..{MAX_PACK_ENTRIES} values, got {len(by_cid)}")
    ordered = sorted(by_cid.items())
    return pack_body_verified([(cid, raw, hashlib.sha256(raw).hexdigest()) for cid, raw in ordered])


def pack_body_verified(entries: Sequence[tuple[bytes, bytes, str]]) -> bytes:
    """``pack_body`` for files the caller already checked: (CID, whole codec-1 CAS file, its
    SHA-256 hex) with the CIDs unique; sorted here. Checks the count, not the files."""
    if not 1 <= len(entries) <= MAX_PACK_ENTRIES:
        raise PackEntryInvalid(f"a pack holds 1..{MAX_PACK_ENTRIES} values, got {len(entries)}")
    ordered = sorted(entries, key=lambda entry: entry[0])
    manifest = _manifest(ordered)
    head = _HEAD.pack(PACK_MAGIC, PACK_VERSION, len(manifest))
    return b"".join([head, manifest, *(raw for _, raw, _ in ordered)])


def _manifest(ordered: Sequence[tuple[bytes, bytes, str]]) -> bytes:
    """The canonical manifest of entries sorted by CID: what :func:`canonical_json` makes of
    it, written directly (a pack holds thousands of entries; the keys of each entry are already
    in sorted order and every value is an int or hex). Falls back to :func:`canonical_json` for
    a checksum that is not 64 lowercase hex, so the bytes are always canonical JSON."""
    rows: list[str] = []
    offset = 0
    for cid, raw, sha256 in ordered:
        if len(sha256) != 64 or not _HEX64.issuperset(sha256):
            return _manifest_json(ordered)
        rows.append(f'{{"cid":"{cid.hex()}","codec":{CODEC_VALUE},"length":{len(raw)},'
                    f'"offset":{offset},"sha256":"{sha256}"}}')  # fmt: skip
        offset += len(raw)
    return f'{{"entries":[{",".join(rows)}],"version":{PACK_VERSION}}}'.encode("ascii")


def _manifest_json(ordered: Sequence[tuple[bytes, bytes, str]]) -> bytes:
    rows: list[dict[str, Any]] = []
    offset = 0
    for cid, raw, sha256 in ordered:
        rows.append(
            {"cid": cid.hex(), "codec": CODEC_VALUE, "length": len(raw), "offset": offset,
             "sha256": sha256}
        )  # fmt: skip
        offset += len(raw)
    return canonical_json({"entries": rows, "version": PACK_VERSION})


def encode_pack(values: Sequence[bytes], level: int = DEFAULT_ZSTD_LEVEL) -> bytes:
    """The compressed pack (one zstd frame with its content size) for whole CAS files."""
    return compress(pack_body(values), level)


def compress(data: bytes, level: int = DEFAULT_ZSTD_LEVEL) -> bytes:
    """One zstd frame with content size and no dictionary; deterministic for a given level."""
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)


def _entry_cid(raw: bytes) -> bytes:
    if len(raw) < _CAS_HEAD.size + 32:
        raise PackEntryInvalid(f"a CAS file is at least 84 bytes, got {len(raw)}")
    magic, _version, codec, _length, cid = _CAS_HEAD.unpack_from(raw)
    if magic != CAS_MAGIC or codec != CODEC_VALUE:
        raise PackEntryInvalid(
            f"packs hold codec-{CODEC_VALUE} CAS files; got magic {magic!r}, codec {codec}"
        )
    return bytes(cid)


def decompress_frame(data: bytes, max_bytes: int = DEFAULT_MAX_PACK_BYTES) -> bytes:
    """Decompress exactly one zstd frame that declares its size (at most ``max_bytes``)."""
    try:
        params = zstandard.get_frame_parameters(data)
    except zstandard.ZstdError as exc:
        raise PackFrameInvalid(f"not a zstd frame: {exc}") from exc
    size = params.content_size
    if size == zstandard.CONTENTSIZE_UNKNOWN or size == zstandard.CONTENTSIZE_ERROR:
        raise PackFrameInvalid("the zstd frame does not declare its content size")
    if size > max_bytes:
        raise PackFrameInvalid(f"the frame declares {size} bytes; the limit is {max_bytes}")
    dobj = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = dobj.decompress(data)
    except zstandard.ZstdError as exc:
        raise PackFrameInvalid(f"zstd frame does not decompress: {exc}") from exc
    if not dobj.eof:
        raise PackFrameInvalid("the zstd frame is truncated")
    if dobj.unused_data:
        raise PackFrameInvalid(f"{len(dobj.unused_data)} bytes follow the zstd frame")
    if len(out) != size:
        raise PackFrameInvalid(f"frame declares {size} bytes but holds {len(out)}")
    return out


def decode_pack(data: bytes, max_bytes: int = DEFAULT_MAX_PACK_BYTES) -> Pack:
    """Decompress and verify a pack; raises only PackError subclasses."""
    return decode_pack_body(decompress_frame(data, max_bytes))


def decode_pack_body(body: bytes) -> Pack:
    """Verify an uncompressed pack: header, canonical manifest, offsets and every entry."""
    if len(body) < _HEAD.size:
        raise PackTruncated(f"a pack header is {_HEAD.size} bytes, got {len(body)}")
    magic, version, manifest_len = _HEAD.unpack_from(body)
    if magic != PACK_MAGIC:
        raise PackBadMagic(f"pack magic is {magic!r}, expected {PACK_MAGIC!r}")
    if version != PACK_VERSION:
        raise PackUnsupportedVersion(f"pack version {version}; supported: {PACK_VERSION}")
    start = _HEAD.size + manifest_len
    if len(body) < start:
        raise PackTruncated(f"manifest needs {manifest_len} bytes, {len(body) - _HEAD.size} left")
    raw_manifest = body[_HEAD.size : start]
    rows = _parse_manifest(raw_manifest)
    entries: list[PackEntry] = []
    expected = 0
    previous = b""
    for row in rows:
        cid = bytes.fromhex(row["cid"])
        if cid <= previous:
            raise PackManifestInvalid(f"entries must be sorted by cid, unique; at {row['cid']}")
        if row["offset"] != expected:
            raise PackManifestInvalid(f"entry {row['cid']} at {row['offset']}, expected {expected}")
        end = start + expected + row["length"]
        if end > len(body):
            raise PackTruncated(f"entry {row['cid']} ends at {end}, pack is {len(body)} bytes")
        raw = body[start + expected : end]
        entries.append(_verify_entry(row, cid, raw))
        expected += row["length"]
        previous = cid
    if start + expected != len(body):
        raise PackManifestInvalid(f"{len(body) - start - expected} bytes follow the last entry")
    return Pack(version, tuple(entries))


def _parse_manifest(raw: bytes) -> list[dict[str, Any]]:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise PackManifestInvalid(f"manifest is not ASCII JSON: {exc}") from exc
    manifest = parse_json(text, _manifest_not_json)
    if not isinstance(manifest, dict) or set(manifest) != {"entries", "version"}:
        raise PackManifestInvalid("manifest must be an object with exactly entries and version")
    if manifest["version"] != PACK_VERSION or isinstance(manifest["version"], bool):
        raise PackManifestInvalid(f"manifest version {manifest['version']!r}, expected 1")
    rows = manifest["entries"]
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_PACK_ENTRIES:
        raise PackManifestInvalid(f"entries must be a list of 1..{MAX_PACK_ENTRIES} objects")
    for row in rows:
        _check_row(row)
    if canonical_json(manifest) != raw:
        raise PackManifestInvalid("manifest is not in canonical form (sorted keys, no spaces)")
    return rows


def _manifest_not_json(reason: str) -> PackManifestInvalid:
    return PackManifestInvalid(f"manifest is not ASCII JSON: {reason}")


def _check_row(row: Any) -> None:
    if not isinstance(row, dict) or set(row) != _ENTRY_KEYS:
        raise PackManifestInvalid(f"an entry has exactly the keys {sorted(_ENTRY_KEYS)}")
    for name in ("cid", "sha256"):
        value = row[name]
        if not (isinstance(value, str) and len(value) == 64 and set(value) <= _HEX64):
            raise PackManifestInvalid(f"entry {name} must be 64 lowercase hex, got {value!r:.80}")
    for name in ("codec", "length", "offset"):
        value = row[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PackManifestInvalid(f"entry {name} must be a non-negative int, got {value!r}")
    if row["codec"] != CODEC_VALUE:
        raise PackManifestInvalid(f"entry codec must be {CODEC_VALUE}, got {row['codec']}")


def _verify_entry(row: dict[str, Any], cid: bytes, raw: bytes) -> PackEntry:
    if hashlib.sha256(raw).hexdigest() != row["sha256"]:
        raise PackEntryInvalid(f"entry {row['cid']}: bytes do not match its sha256")
    try:
        obj = decode_cas_object(raw)
    except SegmentReadError as exc:
        raise PackEntryInvalid(f"entry {row['cid']} is not a valid CAS file: {exc}") from exc
    if obj.cid != cid or obj.codec != row["codec"]:
        raise PackEntryInvalid(
            f"entry {row['cid']} holds CID {obj.cid.hex()} codec {obj.codec}; manifest disagrees"
        )
    return PackEntry(cid, obj.codec, raw, row["sha256"], obj.body)
