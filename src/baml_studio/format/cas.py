"""CAS object files (``cas/sha256/<2hex>/<64hex>.bamlvalue``; reference facts §4.1–§4.2).

Layout (84 bytes of overhead)::

    BAMLVAL1 ‖ u16 CAS_FORMAT_VERSION(=1) ‖ u16 codec ‖ u64 body_len ‖ cid[32] ‖ body
    ‖ SHA-256(everything before)

``cid = SHA-256(b"baml-value-v1" ‖ codec u16 BE ‖ body)``: the decoder recomputes it and a
mismatch is ``InvalidChecksum``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from baml_studio.format.binio import Buffer, Reader, strip_checksum
from baml_studio.format.errors import EncodeError, InvalidChecksum, InvalidMagic, UnsupportedVersion
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


_HEAD = struct.Struct(">8sHHQ32s")


def encode_cas_object(codec: int, body: bytes, cid: bytes | None = None) -> bytes:
    """The whole ``.bamlvalue`` file for ``body`` under ``codec``.

    ``cid`` may be passed when the caller already computed ``value_cid(codec, body)``.
    """
    if not 0 <= codec <= 0xFFFF:
        raise EncodeError(f"codec must fit in u16, got {codec}")
    head = _HEAD.pack(
        CAS_MAGIC, CAS_FORMAT_VERSION, codec, len(body), cid or value_cid(codec, body)
    )
    digest = hashlib.sha256(head)
    digest.update(body)
    return b"".join((head, body, digest.digest()))


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
