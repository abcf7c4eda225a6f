"""Protobuf wire primitives and the precomputed tag bytes of the codec-1 messages (§4.3).

A tag is the varint ``field_number << 3 | wire_type``. Wire types used: 0 varint, 1 fixed64,
2 length-delimited (5 fixed32 is only ever skipped). ``int64`` is a plain two's-complement varint
(ten bytes for a negative number), never zigzag.
"""

from __future__ import annotations

import struct

MASK64 = (1 << 64) - 1
WT_VARINT, WT_FIXED64, WT_LEN, WT_FIXED32 = 0, 1, 2, 5

# PbValue oneof (tags include the wire type).
PB_NULL = b"\x12\x00"  # field 2, an empty PbNull message
TAG_STRING = b"\x1a"  # 3
TAG_INT = b"\x20"  # 4
TAG_FLOAT = b"\x29"  # 5
PB_TRUE = b"\x30\x01"  # 6
PB_FALSE = b"\x30\x00"
TAG_CLASS = b"\x3a"  # 7
TAG_ENUM = b"\x42"  # 8
TAG_LIST = b"\x5a"  # 11
TAG_MAP = b"\x62"  # 12
TAG_MEDIA = b"\x8a\x01"  # 17
TAG_BYTES = b"\x9a\x01"  # 19
TAG_BIGINT = b"\xa2\x01"  # 20

# Fields of the inner messages, all length-delimited.
TAG_F1 = b"\x0a"  # PbMapEntry.key, PbClass.name, PbEnum.name
TAG_F2 = b"\x12"  # PbList.items, PbMapEntry.value, PbClass.fields, PbEnum.value, mime_type
TAG_F3 = b"\x1a"  # PbMap.entries, PbMedia.url
TAG_F4 = b"\x22"  # PbMedia.base64
TAG_F5 = b"\x2a"  # PbMedia.file
TAG_MEDIA_KIND = b"\x08"  # PbMedia.media, a varint

OMITTED_CLASS = "baml.trace.OmittedValue"

ONE_BYTE_VARINTS = tuple(bytes((i,)) for i in range(128))
pack_double = struct.Struct("<d").pack
unpack_double = struct.Struct("<d").unpack_from


def varint(n: int) -> bytes:
    """Unsigned LEB128 of ``0 <= n < 2**64``."""
    if n < 0x80:
        return ONE_BYTE_VARINTS[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def utf8(s: str) -> bytes:
    """UTF-8 of ``s``; lone surrogates (not representable) become ``?`` rather than raising."""
    try:
        return s.encode()
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace")


def len_field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload
