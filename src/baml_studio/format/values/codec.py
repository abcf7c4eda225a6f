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

_SMALL = tuple(bytes((i,)) for i in range(128))
_KEY_FIELDS: dict[str, bytes] = {}
_KEY_CACHE_SIZE = 4096
_KEY_CACHE_MAX_LEN = 64
_INT_SMALL = tuple(TAG_INT + bytes((i,)) for i in range(128))
_SOURCE_TAGS = dict(zip(MEDIA_SOURCES, (TAG_F3, TAG_F4, TAG_F5), strict=True))


# --- scalar and container builders, shared with the direct Python encoder -----------------------


def int_body(n: int) -> bytes:
    if 0 <= n < 128:
        return _INT_SMALL[n]
    if I64_MIN <= n <= I64_MAX:
        return TAG_INT + varint(n & MASK64)
    return bigint_body(n)


def bigint_body(n: int) -> bytes:
    return len_field(TAG_BIGINT, format(n, "x").encode())


def float_body(x: float) -> bytes:
    return TAG_FLOAT + pack_double(x)


def str_body(s: str) -> bytes:
    try:
        b = s.encode()
    except UnicodeEncodeError:
        b = utf8(s)
    n = len(b)
    return TAG_STRING + (_SMALL[n] if n < 128 else varint(n)) + b


def bytes_body(b: bytes) -> bytes:
    return TAG_BYTES + varint(len(b)) + b


def key_field(key: str) -> bytes:
    """``PbMapEntry.key`` as field bytes (empty for ``""``, a proto3 default), memoized."""
    kf = _KEY_FIELDS.get(key)
    if kf is None:
        kb = utf8(key)
        kf = len_field(TAG_F1, kb) if kb else b""
        if len(key) <= _KEY_CACHE_MAX_LEN:
            if len(_KEY_FIELDS) >= _KEY_CACHE_SIZE:
                _KEY_FIELDS.clear()
            _KEY_FIELDS[key] = kf
    return kf


def list_body(items: Iterable[bytes]) -> bytes:
    """``PbValue{list}`` from already encoded item bodies."""
    parts = [TAG_LIST, b""]
    small = _SMALL
    for vb in items:
        n = len(vb)
        parts += (TAG_F2, small[n] if n < 128 else varint(n), vb)
    parts[1] = varint(sum(map(len, parts)) - 1)
    return b"".join(parts)


def entries_body(class_name: str | None, pairs: Iterable[tuple[str, bytes]]) -> bytes:
    """``PbValue{map}`` (``class_name is None``) or ``PbValue{class}`` from encoded entry values."""
    if class_name is None:
        parts, entry_tag = [TAG_MAP, b""], TAG_F3
    else:  # PbClass.name is field 1, like PbMapEntry.key
        parts, entry_tag = [TAG_CLASS, b"", key_field(class_name)], TAG_F2
    small, keys = _SMALL, _KEY_FIELDS
    for key, vb in pairs:
        kf = keys.get(key) or key_field(key)
        n = len(vb)
        vh = small[n] if n < 128 else varint(n)
        inner = len(kf) + 1 + len(vh) + n
        parts += (entry_tag, small[inner] if inner < 128 else varint(inner), kf, TAG_F2, vh, vb)
    parts[1] = varint(sum(map(len, parts)) - len(parts[0]))
    return b"".join(parts)


def omitted_body(reason: str) -> bytes:
    head, sep, tail = reason.partition(": ")
    if sep and head and tail:
        return entries_body(
            OMITTED_CLASS, (("reason", str_body(head)), ("message", str_body(tail)))
        )
    return entries_body(OMITTED_CLASS, (("reason", str_body(reason)),))


# --- Value encoder ------------------------------------------------------------------------------


def _enum(v: Enum) -> bytes:
    nb, vb = utf8(v.name), utf8(v.variant)
    payload = (len_field(TAG_F1, nb) if nb else b"") + (len_field(TAG_F2, vb) if vb else b"")
    return len_field(TAG_ENUM, payload)


def _media(v: Media) -> bytes:
    payload = TAG_MEDIA_KIND + varint(int(v.kind)) if v.kind else b""
    if v.mime is not None:
        payload += len_field(TAG_F2, utf8(v.mime))
    if v.source is not None:
        payload += len_field(_SOURCE_TAGS[v.source], utf8(v.content))
    return len_field(TAG_MEDIA, payload)


def _body(v: Value) -> bytes:
    return _ENCODERS[type(v)](v)


_ENCODERS: dict[type[Any], Callable[[Any], bytes]] = {
    Null: lambda v: PB_NULL,
    Bool: lambda v: PB_TRUE if v.value else PB_FALSE,
    Int: lambda v: int_body(v.value),
    Float: lambda v: float_body(v.value),
    BigInt: lambda v: bigint_body(int(v.value)),
    String: lambda v: str_body(v.value),
    Bytes: lambda v: bytes_body(v.value),
    List: lambda v: list_body([_body(item) for item in v.items]),
    Map: lambda v: entries_body(None, [(k, _body(x)) for k, x in v.entries]),
    Class: lambda v: entries_body(v.name, [(k, _body(x)) for k, x in v.fields]),
    Enum: _enum,
    Media: _media,
    Omitted: lambda v: omitted_body(v.reason),
}


def encode_value(v: Value) -> bytes:
    """Encode ``v`` as a codec-1 body (a top-level ``PbValue`` message).

    Raises :class:`EncodeError` if ``v`` is not a :data:`Value` or nests too deeply for the
    Python stack. Bodies nested deeper than the decoder's ``max_depth`` encode but do not decode.
    """
    try:
        return _body(v)
    except RecursionError as exc:
        raise EncodeError("value nests too deeply to encode") from exc
    except KeyError as exc:
        raise EncodeError(f"not a codec-1 Value: {exc.args[0]!r} inside the value") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise EncodeError(f"malformed codec-1 Value: {exc}") from exc
