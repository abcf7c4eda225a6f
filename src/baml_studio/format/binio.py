"""Big-endian byte writer/reader shared by every profiles-v1 codec (reference facts §2).

Common rules: integers are big-endian; ``str`` is ``u32 len ‖ utf8`` and the encoder refuses
strings over 64 KiB; ``opt X`` is ``0x00`` or ``0x01 ‖ X`` (any other tag is ``InvalidKind``);
every file is ``body ‖ SHA-256(body)``.

:class:`Reader` raises only :class:`~baml_studio.format.errors.SegmentReadError` subclasses, and
:class:`Writer` only :class:`~baml_studio.format.errors.EncodeError`, whatever the input.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from baml_studio.format.errors import (
    EncodeError,
    EuidMismatch,
    InvalidChecksum,
    InvalidKind,
    InvalidMagic,
    InvalidUtf8,
    TrailingBytes,
    Truncated,
    UnsupportedVersion,
)
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import MAX_STRING_BYTES, CallSiteSpan

T = TypeVar("T")
Buffer = bytes | bytearray | memoryview

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_THREAD = struct.Struct(">16sQQ")
_CALL = struct.Struct(">16sQQQ")
_SITE = struct.Struct(">IIII")
CHECKSUM_BYTES = 32


class Writer:
    """Appends big-endian fields to a growing buffer; :meth:`getvalue` returns the bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def __len__(self) -> int:
        return len(self._buf)

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def _pack(self, fmt: struct.Struct, value: int, what: str) -> None:
        try:
            self._buf += fmt.pack(value)
        except struct.error as exc:
            raise EncodeError(f"{what} out of range: {value!r}") from exc

    def u8(self, value: int) -> None:
        if not 0 <= value <= 0xFF:
            raise EncodeError(f"u8 out of range: {value!r}")
        self._buf.append(value)

    def u16(self, value: int) -> None:
        self._pack(_U16, value, "u16")

    def u32(self, value: int) -> None:
        self._pack(_U32, value, "u32")

    def u64(self, value: int) -> None:
        self._pack(_U64, value, "u64")

    def u128(self, value: int) -> None:
        try:
            self._buf += value.to_bytes(16, "big")
        except OverflowError as exc:
            raise EncodeError(f"u128 out of range: {value!r}") from exc

    def raw(self, data: Buffer) -> None:
        self._buf += data

    def fixed(self, data: bytes, size: int, what: str) -> None:
        """A fixed-width byte field (euid, key, cid...): exactly ``size`` bytes."""
        if len(data) != size:
            raise EncodeError(f"{what} must be {size} bytes, got {len(data)}")
        self._buf += data

    def string(self, value: str) -> None:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EncodeError(f"string is not encodable as UTF-8: {value[:40]!r}") from exc
        if len(data) > MAX_STRING_BYTES:
            raise EncodeError(
                f"string of {len(data)} bytes exceeds the {MAX_STRING_BYTES}-byte limit "
                "(StringTooLong); shorten it"
            )
        self._buf += _U32.pack(len(data))
        self._buf += data

    def opt(self, value: T | None, put: Callable[[T], object]) -> None:
        """``0x00`` for None, else ``0x01`` followed by ``put(value)``."""
        if value is None:
            self._buf.append(0)
        else:
            self._buf.append(1)
            put(value)


class Reader:
    """Reads big-endian fields from ``data[start:end]`` without copying the buffer."""

    __slots__ = ("_end", "_mv", "pos")

    def __init__(self, data: Buffer, start: int = 0, end: int | None = None) -> None:
        self._mv = data if isinstance(data, memoryview) else memoryview(data)
        self.pos = start
        self._end = len(self._mv) if end is None else end

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _advance(self, size: int) -> int:
        start = self.pos
        if size < 0 or size > self._end - start:
            self._short(size)
        self.pos = start + size
        return start

    def _short(self, size: int) -> NoReturn:
        left = self._end - self.pos
        raise Truncated(f"need {size} bytes at offset {self.pos}, {left} left")

    # The readers below inline the bounds check: they run once per field of every record.

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        start = self.pos
        if fmt.size > self._end - start:
            self._short(fmt.size)
        self.pos = start + fmt.size
        return fmt.unpack_from(self._mv, start)

    def u8(self) -> int:
        start = self.pos
        if start >= self._end:
            self._short(1)
        self.pos = start + 1
        return self._mv[start]

    def u16(self) -> int:
        return int(_U16.unpack_from(self._mv, self._advance(2))[0])

    def u32(self) -> int:
        start = self.pos
        if start + 4 > self._end:
            self._short(4)
        self.pos = start + 4
        return int(_U32.unpack_from(self._mv, start)[0])

    def u64(self) -> int:
        start = self.pos
        if start + 8 > self._end:
            self._short(8)
        self.pos = start + 8
        return int(_U64.unpack_from(self._mv, start)[0])

    def u128(self) -> int:
        start = self._advance(16)
        return int.from_bytes(self._mv[start : start + 16], "big")

    def raw(self, size: int) -> bytes:
        start = self.pos
        end = start + size
        if size < 0 or end > self._end:
            self._short(size)
        self.pos = end
        return self._mv[start:end].tobytes()

    def view(self, size: int) -> memoryview:
        """The next ``size`` bytes as a zero-copy view."""
        start = self._advance(size)
        return self._mv[start : start + size]

    def string(self) -> str:
        size = self.u32()
        start = self._advance(size)
        try:
            return str(self._mv[start : start + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidUtf8(f"string at offset {start} is not valid UTF-8") from exc

    def flag(self) -> bool:
        """An ``opt`` tag: False for 0x00, True for 0x01, ``InvalidKind`` otherwise."""
        tag = self.u8()
        if tag > 1:
            raise InvalidKind(f"option tag must be 0 or 1, got {tag} at offset {self.pos - 1}")
        return tag == 1

    def opt(self, get: Callable[[], T]) -> T | None:
        return get() if self.flag() else None

    def finish(self) -> None:
        """Raise ``TrailingBytes`` unless every byte was consumed."""
        if self.pos != self._end:
            raise TrailingBytes(f"{self._end - self.pos} unexpected bytes at offset {self.pos}")


def with_checksum(body: Buffer) -> bytes:
    """``body ‖ SHA-256(body)``."""
    return bytes(body) + hashlib.sha256(body).digest()


def strip_checksum(file_bytes: Buffer) -> memoryview:
    """Validate the trailing SHA-256 and return a view of the body before it."""
    mv = file_bytes if isinstance(file_bytes, memoryview) else memoryview(file_bytes)
    if len(mv) < CHECKSUM_BYTES:
        raise Truncated(f"{len(mv)} bytes is shorter than the 32-byte trailing SHA-256")
    body = mv[: len(mv) - CHECKSUM_BYTES]
    if hashlib.sha256(body).digest() != mv[len(mv) - CHECKSUM_BYTES :]:
        raise InvalidChecksum("trailing SHA-256 does not match the file content")
    return body


def segment_header(
    raw: Buffer, magic: bytes, what: str, version: int, expected_euid: bytes | None
) -> tuple[Reader, int, bytes]:
    """The checked start of a meta or data segment file: the trailing checksum, ``magic``, the
    schema ``version``, then the sequence and the euid (``expected_euid``: the stream
    directory's). Returns the reader after the euid, the sequence and the euid."""
    r = Reader(strip_checksum(raw))
    if r.raw(8) != magic:
        raise InvalidMagic(f"not a {what} segment (expected magic {magic!r})")
    found = r.u16()
    if found != version:
        raise UnsupportedVersion(found, version)
    sequence = r.u64()
    euid = r.raw(16)
    if expected_euid is not None and euid != expected_euid:
        raise EuidMismatch(f"segment euid {euid.hex()} != stream directory {expected_euid.hex()}")
    return r, sequence, euid


def enum_at(table: tuple[T, ...], value: int, what: str) -> T:
    """``table[value]`` for a dense wire enum; ``InvalidKind`` for anything outside it."""
    if value >= len(table):
        raise InvalidKind(f"invalid {what} {value} (valid: 0-{len(table) - 1})")
    return table[value]


# --- common composite fields (§2 Common rules) ---------------------------------------------------


def put_thread(w: Writer, ref: ThreadRef) -> None:
    """``ThreadRef`` = ``euid[16] ‖ engine u64 ‖ thread u64`` (32 bytes)."""
    w.fixed(ref.euid, 16, "ThreadRef.euid")
    w.u64(ref.engine)
    w.u64(ref.thread)


def read_thread(r: Reader) -> ThreadRef:
    euid, engine, thread = r.unpack(_THREAD)
    return ThreadRef(euid, engine, thread)


def put_call(w: Writer, ref: CallRef) -> None:
    """``CallRef`` = ``ThreadRef ‖ call_id u64`` (40 bytes)."""
    put_thread(w, ref.thread)
    w.u64(ref.call_id)


def read_call(r: Reader) -> CallRef:
    euid, engine, thread, call_id = r.unpack(_CALL)
    return CallRef(ThreadRef(euid, engine, thread), call_id)


def put_site(w: Writer, site: CallSiteSpan) -> None:
    """``CallSiteSourceSpan`` = ``file_id, start_offset, end_offset, line`` (4 × u32)."""
    w.u32(site.file_id)
    w.u32(site.start_offset)
    w.u32(site.end_offset)
    w.u32(site.line)


def read_site(r: Reader) -> CallSiteSpan:
    file_id, start, end, line = r.unpack(_SITE)
    return CallSiteSpan(file_id, start, end, line)
