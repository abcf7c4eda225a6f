"""CAS object files (``cas/sha256/<2hex>/<64hex>.bamlvalue``; reference facts §4.1–§4.2).

Layout (84 bytes of overhead)::

    BAMLVAL1 ‖ u16 CAS_FORMAT_VERSION(=1) ‖ u16 codec ‖ u64 body_len ‖ cid[32] ‖ body
    ‖ SHA-256(everything before)

``cid = SHA-256(b"baml-value-v1" ‖ codec u16 BE ‖ body)``: the decoder recomputes it and a
mismatch is ``InvalidChecksum``.
"""

from __future__ import annotations

from dataclasses import dataclass

from baml_studio.format.binio import Buffer, Reader, Writer, strip_checksum, with_checksum
from baml_studio.format.errors import InvalidChecksum, InvalidMagic, UnsupportedVersion
from baml_studio.format.ids import value_cid

CAS_MAGIC = b"BAMLVAL1"
CAS_FORMAT_VERSION = 1
CAS_OVERHEAD_BYTES = 84
CODEC_VALUE = 1
CODEC_FUNCTION_TABLE = 2


@dataclass(frozen=True, slots=True)
class CasObject:
    codec: int
    cid: bytes
    body: bytes


def encode_cas_object(codec: int, body: bytes) -> bytes:
    """The whole ``.bamlvalue`` file for ``body`` under ``codec``."""
    w = Writer()
    w.raw(CAS_MAGIC)
    w.u16(CAS_FORMAT_VERSION)
    w.u16(codec)
    w.u64(len(body))
    w.raw(value_cid(codec, body))
    w.raw(body)
    return with_checksum(w.getvalue())


def decode_cas_object(raw: Buffer) -> CasObject:
    """Decode and verify a CAS object (checksum, magic, version, length, recomputed CID)."""
    r = Reader(strip_checksum(raw))
    if r.raw(8) != CAS_MAGIC:
        raise InvalidMagic(f"not a CAS object (expected magic {CAS_MAGIC!r})")
    version = r.u16()
    if version != CAS_FORMAT_VERSION:
        raise UnsupportedVersion(version, CAS_FORMAT_VERSION)
    codec = r.u16()
    body_len = r.u64()
    cid = r.raw(32)
    body = r.raw(body_len)
    r.finish()
    if value_cid(codec, body) != cid:
        raise InvalidChecksum(f"CAS object CID {cid.hex()} does not match its codec and body")
    return CasObject(codec, cid, body)


def cas_relpath(cid: bytes) -> str:
    """Path of a CAS object relative to the store root: ``cas/sha256/<2hex>/<64hex>.bamlvalue``."""
    if len(cid) != 32:
        raise ValueError(f"a CID is 32 bytes, got {len(cid)}")
    digest = cid.hex()
    return f"cas/sha256/{digest[:2]}/{digest}.bamlvalue"
