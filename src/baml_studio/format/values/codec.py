"""Codec 1 value bodies: the protobuf ``BamlOutboundValue`` mirror (reference facts §4.3).

:func:`encode_value` writes exactly the message set of §4.3 and is deterministic: the same
:data:`Value` always gives the same bytes. Choices, which are part of the format contract:

* map entries and class fields are written in the value's order (insertion order; no sort). Two
  maps with the same entries in a different order therefore get different bytes and CIDs; a CID
  promises byte identity only (§4.1), and semantic comparison sorts keys;
* proto3 defaults are omitted like ``prost`` does for non-oneof fields (an empty map key, class
  name, enum name/variant, media kind 0); oneof members are always written (``Int(0)`` is
  ``20 00``); ``PbMedia.mime_type`` is ``optional`` and is written whenever it is not ``None``;
* ``Int`` outside i64 and every ``BigInt`` are written as ``bigint``: lower-case base 16 with a
  leading ``-`` for negatives;
* ``Omitted(reason)`` is written as class ``baml.trace.OmittedValue``: a reason ``"r: m"`` with
  both parts non-empty becomes string fields ``reason=r`` and ``message=m``, anything else is a
  lone ``reason`` field, so decoding gives the same reason back;
* strings with lone surrogates (not UTF-8) are written with ``?`` in their place.

Speed: everything is appended to one ``bytearray``; a message's length varint is inserted in
front of its content once the content is written (a short ``memmove`` of that message only),
so no per-node ``bytes`` objects are built. The writers are shared with
:mod:`baml_studio.format.values.python`, which is why they are public here.

The decoder lives in :mod:`baml_studio.format.values.decode` and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from baml_studio.format.errors import EncodeError
from baml_studio.format.values.decode import (
    DEFAULT_MAX_DEPTH,
    ValueTooDeep,
    decode_value,
)
from baml_studio.format.values.model import (
    I64_MAX,
    I64_MIN,
    MEDIA_SOURCES,
    BigInt,
    Bool,
    Bytes,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Media,
    Null,
    Omitted,
    String,
    Value,
)
from baml_studio.format.values.wire import (
    MASK64,
    OMITTED_CLASS,
    ONE_BYTE_VARINTS,
    PB_FALSE,
    PB_NULL,
    PB_TRUE,
    TAG_BIGINT,
    TAG_BYTES,
    TAG_CLASS,
    TAG_ENUM,
    TAG_F1,
    TAG_F2,
    TAG_F3,
    TAG_F4,
    TAG_F5,
    TAG_FLOAT,
    TAG_INT,
    TAG_LIST,
    TAG_MAP,
    TAG_MEDIA,
    TAG_MEDIA_KIND,
    TAG_STRING,
    len_field,
    pack_double,
    utf8,
    varint,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ValueTooDeep",
    "decode_value",
    "encode_value",
]

ENTRY_OF_MAP = 0x1A  # PbMap.entries = 3
ENTRY_OF_CLASS = 0x12  # PbClass.fields = 2
_INT_SMALL = tuple(TAG_INT + bytes((i,)) for i in range(128))
_SOURCE_TAGS = dict(zip(MEDIA_SOURCES, (TAG_F3, TAG_F4, TAG_F5), strict=True))
KEY_FIELDS: dict[str, bytes] = {}
"""Memo of :func:`key_field` (keys and class names repeat across captures); cleared when full."""
_KEY_CACHE_SIZE = 4096
_KEY_CACHE_MAX_LEN = 64


# --- writers shared with the direct Python encoder ----------------------------------------------


def frame(out: bytearray, start: int) -> None:
    """Insert the varint length of ``out[start:]`` at ``start``."""
    n = len(out) - start
    if n < 128:
        out.insert(start, n)
    else:
        out[start:start] = varint(n)


def key_field(key: str) -> bytes:
    """Field 1 (``PbMapEntry.key``, ``PbClass.name``) as bytes, empty for ``""``; memoized."""
    kf = KEY_FIELDS.get(key)
    if kf is None:
        kb = utf8(key)
        kf = len_field(TAG_F1, kb) if kb else b""
        if len(key) <= _KEY_CACHE_MAX_LEN:
            if len(KEY_FIELDS) >= _KEY_CACHE_SIZE:
                KEY_FIELDS.clear()
            KEY_FIELDS[key] = kf
    return kf


def write_int(out: bytearray, n: int) -> None:
    if 0 <= n < 128:
        out += _INT_SMALL[n]
    elif I64_MIN <= n <= I64_MAX:
        out += TAG_INT
        out += varint(n & MASK64)
    else:
        write_bigint(out, n)


def write_bigint(out: bytearray, n: int) -> None:
    out += len_field(TAG_BIGINT, format(n, "x").encode())


def write_float(out: bytearray, x: float) -> None:
    out += TAG_FLOAT
    out += pack_double(x)


def write_str(out: bytearray, s: str) -> None:
    try:
        b = s.encode()
    except UnicodeEncodeError:
        b = utf8(s)
    n = len(b)
    out += TAG_STRING
    out += ONE_BYTE_VARINTS[n] if n < 128 else varint(n)
    out += b


def write_bytes(out: bytearray, b: bytes) -> None:
    out += TAG_BYTES
    out += varint(len(b))
    out += b


def write_omitted(out: bytearray, reason: str) -> None:
    head, sep, tail = reason.partition(": ")
    if sep and head and tail:
        fields: tuple[tuple[str, Value], ...] = (
            ("reason", String(head)),
            ("message", String(tail)),
        )
    else:
        fields = (("reason", String(reason)),)
    _write_entries(out, OMITTED_CLASS, fields)


# --- Value encoder ------------------------------------------------------------------------------


def _write(out: bytearray, v: Value) -> None:
    _WRITERS[type(v)](out, v)


def _write_list(out: bytearray, v: List) -> None:
    out += TAG_LIST
    start = len(out)
    for item in v.items:
        out.append(0x12)  # PbList.items = 2
        s = len(out)
        _write(out, item)
        frame(out, s)
    frame(out, start)


def _write_entries(out: bytearray, name: str | None, pairs: Iterable[tuple[str, Value]]) -> None:
    if name is None:
        out += TAG_MAP
        start, etag = len(out), ENTRY_OF_MAP
    else:
        out += TAG_CLASS
        start, etag = len(out), ENTRY_OF_CLASS
        out += key_field(name)
    for key, x in pairs:
        out.append(etag)
        es = len(out)
        out += KEY_FIELDS.get(key) or key_field(key)
        out.append(0x12)  # PbMapEntry.value = 2
        vs = len(out)
        _write(out, x)
        frame(out, vs)
        frame(out, es)
    frame(out, start)


def _write_enum(out: bytearray, v: Enum) -> None:
    nb, vb = utf8(v.name), utf8(v.variant)
    payload = (len_field(TAG_F1, nb) if nb else b"") + (len_field(TAG_F2, vb) if vb else b"")
    out += len_field(TAG_ENUM, payload)


def _write_media(out: bytearray, v: Media) -> None:
    payload = TAG_MEDIA_KIND + varint(int(v.kind)) if v.kind else b""
    if v.mime is not None:
        payload += len_field(TAG_F2, utf8(v.mime))
    if v.source is not None:
        payload += len_field(_SOURCE_TAGS[v.source], utf8(v.content))
    out += len_field(TAG_MEDIA, payload)


_WRITERS: dict[type[Any], Callable[[bytearray, Any], None]] = {
    Null: lambda out, v: out.extend(PB_NULL),
    Bool: lambda out, v: out.extend(PB_TRUE if v.value else PB_FALSE),
    Int: lambda out, v: write_int(out, v.value),
    Float: lambda out, v: write_float(out, v.value),
    BigInt: lambda out, v: write_bigint(out, int(v.value)),
    String: lambda out, v: write_str(out, v.value),
    Bytes: lambda out, v: write_bytes(out, v.value),
    List: _write_list,
    Map: lambda out, v: _write_entries(out, None, v.entries),
    Class: lambda out, v: _write_entries(out, v.name, v.fields),
    Enum: _write_enum,
    Media: _write_media,
    Omitted: lambda out, v: write_omitted(out, v.reason),
}


def write_value(out: bytearray, v: Value) -> None:
    """Append the ``PbValue`` body of ``v`` to ``out`` (see :func:`encode_value`)."""
    try:
        _write(out, v)
    except RecursionError as exc:
        raise EncodeError("value nests too deeply to encode") from exc
    except KeyError as exc:
        raise EncodeError(f"not a codec-1 Value: {exc.args[0]!r} inside the value") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise EncodeError(f"malformed codec-1 Value: {exc}") from exc


def encode_value(v: Value) -> bytes:
    """Encode ``v`` as a codec-1 body (a top-level ``PbValue`` message).

    Raises :class:`EncodeError` if ``v`` is not a :data:`Value` or nests too deeply for the
    Python stack. Bodies nested deeper than the decoder's ``max_depth`` encode but do not decode.
    """
    out = bytearray()
    write_value(out, v)
    return bytes(out)
