"""Decoder of codec-1 value bodies (reference facts §4.3).

Rules beyond the schema:

* ``bigint`` is base 16 with an optional leading ``-``; it decodes to minimal decimal. One too
  long for Python's int/str conversion limit (4300 decimal digits) decodes as ``Omitted``;
* class ``baml.trace.OmittedValue`` decodes to ``Omitted("<reason>: <message>")`` from its string
  fields (a missing or empty part is left out together with the ``": "``);
* a ``PbValue`` with no known oneof member (a newer producer's tag, or an empty message such as a
  map entry without a value) decodes to ``Omitted(UNKNOWN_VARIANT)``, whose reason is
  ``"unknown codec-1 value variant (newer producer?)"``;
* unknown fields of wire types 0, 1, 2 and 5 are skipped; a known field with the wrong wire type,
  a group (wire types 3/4), field number 0, a varint over ten bytes, a length past the end or bad
  UTF-8 raise :class:`ValueCorrupt`;
* a singular field that appears twice: the last occurrence wins (no message merge), every
  occurrence must still be well formed; an unknown ``PbMediaKind`` number becomes ``OTHER``;
* nesting deeper than ``max_depth`` (the top value is depth 0) raises :class:`ValueTooDeep`, the
  spec's ``Truncated``: the whole value is unavailable, there is no partial value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from baml_studio.format.errors import ValueCorrupt
from baml_studio.format.values.model import (
    MEDIA_SOURCES,
    NULL,
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
    MediaKind,
    MediaSource,
    Omitted,
    String,
    Value,
)
from baml_studio.format.values.wire import (
    MASK64,
    OMITTED_CLASS,
    WT_FIXED32,
    WT_FIXED64,
    WT_LEN,
    WT_VARINT,
    unpack_double,
)

DEFAULT_MAX_DEPTH = 100
UNKNOWN_VARIANT = "unknown codec-1 value variant (newer producer?)"
_HEX = re.compile(rb"-?[0-9a-fA-F]+")
# PbValue oneof member -> wire type.
_VALUE_WIRE = {2: 2, 3: 2, 4: 0, 5: 1, 6: 0, 7: 2, 8: 2, 11: 2, 12: 2, 17: 2, 19: 2, 20: 2}
_SOURCES: dict[int, MediaSource] = dict(zip((3, 4, 5), MEDIA_SOURCES, strict=True))


class ValueTooDeep(ValueCorrupt):
    """A body nested deeper than the decoder's ``max_depth`` (the spec's ``Truncated``).

    A subclass of :class:`ValueCorrupt` so that "a decoder raises only ValueCorrupt" holds; the
    resolver checks for it first and reports ``truncated`` instead of ``corrupt``.
    """

    remedy = "raise the decode depth budget (max_decode_depth) to read this value"


def decode_value(
    body: bytes | bytearray | memoryview, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> Value:
    """Decode a codec-1 body. Raises only :class:`ValueCorrupt` (or its :class:`ValueTooDeep`)."""
    buf = bytes(body)
    try:
        return _Decoder(buf, max_depth).value(0, len(buf), 0)
    except RecursionError as exc:
        raise ValueTooDeep("value nests deeper than the Python stack allows") from exc


def _wrong_wire_type(wt: int, want: int, what: str) -> ValueCorrupt:
    return ValueCorrupt(f"{what} has wire type {wt}, expected {want}")


class _Decoder:
    __slots__ = ("buf", "max_depth")

    def __init__(self, buf: bytes, max_depth: int) -> None:
        self.buf = buf
        self.max_depth = max_depth

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        buf, result, shift = self.buf, 0, 0
        while pos < end:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result & MASK64, pos
            shift += 7
            if shift >= 70:
                raise ValueCorrupt(f"varint longer than 10 bytes at offset {pos}")
        raise ValueCorrupt(f"truncated varint at offset {pos}")

    def fields(self, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """Yield ``(field, wire_type, a, b)``: a varint's value in ``a``, else the span ``a:b``."""
        buf = self.buf
        while pos < end:
            key = buf[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = self.varint(pos, end)
            field, wt = key >> 3, key & 7
            if field == 0 or key > 0xFFFFFFFF:
                raise ValueCorrupt(f"invalid field number {field} at offset {pos}")
            if wt == WT_VARINT:
                value, pos = self.varint(pos, end)
                yield field, wt, value, 0
                continue
            if wt == WT_LEN:
                if pos < end and buf[pos] < 0x80:
                    size = buf[pos]
                    pos += 1
                else:
                    size, pos = self.varint(pos, end)
            elif wt == WT_FIXED64:
                size = 8
            elif wt == WT_FIXED32:
                size = 4
            else:
                raise ValueCorrupt(f"unsupported wire type {wt} (field {field})")
            if size > end - pos:
                raise ValueCorrupt(f"field {field} runs {size} bytes past offset {pos} of {end}")
            yield field, wt, pos, pos + size
            pos += size

    def text(self, a: int, b: int) -> str:
        try:
            return self.buf[a:b].decode()
        except UnicodeDecodeError as exc:
            raise ValueCorrupt(f"string at offset {a} is not UTF-8") from exc

    def value(self, pos: int, end: int, depth: int) -> Value:
        if depth > self.max_depth:
            raise ValueTooDeep(f"value nests deeper than max_depth={self.max_depth}")
        result: Value | None = None
        for field, wt, a, b in self.fields(pos, end):
            want = _VALUE_WIRE.get(field)
            if want is None:
                continue
            if wt != want:
                raise _wrong_wire_type(wt, want, f"PbValue field {field}")
            if field == 3:
                result = String(self.text(a, b))
            elif field == 4:
                result = Int(a - (1 << 64) if a >> 63 else a)
            elif field == 12:
                result = Map(tuple(self.entries(a, b, 3, depth)))
            elif field == 7:
                result = self.klass(a, b, depth)
            elif field == 11:
                result = List(tuple(self.value(s, e, depth + 1) for s, e in self.spans(a, b, 2)))
            elif field == 5:
                result = Float(unpack_double(self.buf, a)[0])
            elif field == 6:
                result = Bool(a != 0)
            elif field == 2:
                self.spans(a, b, 0)  # an empty PbNull, but unknown fields must still parse
                result = NULL
            elif field == 8:
                name, variant = self.strings(a, b, 1, 2)
                result = Enum(name, variant)
            elif field == 19:
                result = Bytes(self.buf[a:b])
            elif field == 20:
                result = self.bigint(a, b)
            else:  # 17
                result = self.media(a, b)
        return Omitted(UNKNOWN_VARIANT) if result is None else result

    def spans(self, pos: int, end: int, want: int) -> list[tuple[int, int]]:
        """Spans of the length-delimited field ``want``; other fields are checked and skipped."""
        out = []
        for field, wt, a, b in self.fields(pos, end):
            if field == want:
                if wt != WT_LEN:
                    raise _wrong_wire_type(wt, WT_LEN, f"field {field}")
                out.append((a, b))
        return out

    def strings(self, pos: int, end: int, f1: int, f2: int) -> tuple[str, str]:
        first = second = ""
        for field, wt, a, b in self.fields(pos, end):
            if field in (f1, f2):
                if wt != WT_LEN:
                    raise _wrong_wire_type(wt, WT_LEN, f"string field {field}")
                if field == f1:
                    first = self.text(a, b)
                else:
                    second = self.text(a, b)
        return first, second

    def entries(self, pos: int, end: int, want: int, depth: int) -> Iterator[tuple[str, Value]]:
        for a, b in self.spans(pos, end, want):
            key, value = "", None
            for field, wt, s, e in self.fields(a, b):
                if field == 1:
                    if wt != WT_LEN:
                        raise _wrong_wire_type(wt, WT_LEN, "PbMapEntry.key")
                    key = self.text(s, e)
                elif field == 2:
                    if wt != WT_LEN:
                        raise _wrong_wire_type(wt, WT_LEN, "PbMapEntry.value")
                    value = self.value(s, e, depth + 1)
            yield key, Omitted(UNKNOWN_VARIANT) if value is None else value

    def klass(self, pos: int, end: int, depth: int) -> Value:
        name = ""
        for a, b in self.spans(pos, end, 1):
            name = self.text(a, b)
        fields = tuple(self.entries(pos, end, 2, depth))
        if name != OMITTED_CLASS:
            return Class(name, fields)
        parts = {k: v.value for k, v in fields if k in ("reason", "message") and type(v) is String}
        return Omitted(": ".join(p for p in (parts.get("reason"), parts.get("message")) if p))

    def bigint(self, a: int, b: int) -> Value:
        raw = self.buf[a:b]
        if not _HEX.fullmatch(raw):
            raise ValueCorrupt(f"bigint {raw[:40]!r} is not '-'? followed by hex digits")
        try:
            return BigInt(str(int(raw, 16)))
        except ValueError:
            return Omitted(f"bigint_too_large: {len(raw)} hex digits")

    def media(self, pos: int, end: int) -> Media:
        kind, mime, source, content = 0, None, None, ""
        for field, wt, a, b in self.fields(pos, end):
            if field == 1:
                if wt != WT_VARINT:
                    raise _wrong_wire_type(wt, WT_VARINT, "PbMedia.media")
                kind = a
            elif field == 2:
                if wt != WT_LEN:
                    raise _wrong_wire_type(wt, WT_LEN, "PbMedia.mime_type")
                mime = self.text(a, b)
            elif field in _SOURCES:
                if wt != WT_LEN:
                    raise _wrong_wire_type(wt, WT_LEN, f"PbMedia field {field}")
                source, content = _SOURCES[field], self.text(a, b)
        return Media(MediaKind(min(kind, MediaKind.OTHER)), mime, source, content)
