"""Identities of the profiles-v1 store and their wire strings (reference facts §3.4).

Binary forms are big-endian; wire forms are what SQL and the CLI show.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from dataclasses import dataclass

from baml_studio.format.errors import SegmentReadError

THREAD_WIRE_PREFIX = "baml_thread_1_"
CALL_WIRE_PREFIX = "baml_call_1_"
RUNTIME_WIRE_PREFIX = "baml_id_1_"
VALUE_CID_WIRE_PREFIX = "bamlv_1_"
WIRE_VERSION = 0x01
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1


class InvalidWireId(SegmentReadError):
    """A wire id string that does not parse."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str, expected_len: int) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise InvalidWireId(f"not base64url: {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidWireId(f"not base64url: {text!r}") from exc
    if len(raw) != expected_len or _b64(raw) != text:
        raise InvalidWireId(f"expected {expected_len} bytes, got {len(raw)}")
    return raw


@functools.lru_cache(maxsize=1 << 16)
def _thread_wire(euid: bytes, engine: int, thread: int) -> str:
    """Cached: every relation row of an execution names it, so one id is rendered many times."""
    raw = bytes([WIRE_VERSION]) + euid + engine.to_bytes(8, "big") + thread.to_bytes(8, "big")
    return THREAD_WIRE_PREFIX + _b64(raw)


@dataclass(frozen=True, slots=True, order=True)
class ThreadRef:
    """A logical thread: ``euid[16] ‖ engine u64 ‖ thread u64`` (32 bytes).

    A parentless thread is an execution; its ThreadRef is the execution id.
    Ordering is the ordering of the 32 wire bytes (groups in a data segment sort by it).
    """

    euid: bytes
    engine: int
    thread: int

    def to_bytes(self) -> bytes:
        return self.euid + self.engine.to_bytes(8, "big") + self.thread.to_bytes(8, "big")

    @classmethod
    def from_bytes(cls, raw: bytes) -> ThreadRef:
        if len(raw) != 32:
            raise InvalidWireId(f"ThreadRef needs 32 bytes, got {len(raw)}")
        return cls(raw[:16], int.from_bytes(raw[16:24], "big"), int.from_bytes(raw[24:32], "big"))

    def wire(self) -> str:
        """``baml_thread_1_`` + base64url-nopad(0x01 ‖ 32 bytes): 58 characters."""
        return _thread_wire(self.euid, self.engine, self.thread)

    @classmethod
    def parse_wire(cls, text: str) -> ThreadRef:
        if not text.startswith(THREAD_WIRE_PREFIX):
            raise InvalidWireId(f"thread id must start with {THREAD_WIRE_PREFIX!r}: {text!r}")
        raw = _unb64(text[len(THREAD_WIRE_PREFIX) :], 33)
        if raw[0] != WIRE_VERSION:
            raise InvalidWireId(f"unknown thread id version {raw[0]}")
        return cls.from_bytes(raw[1:])


@dataclass(frozen=True, slots=True, order=True)
class CallRef:
    """One call: ``ThreadRef ‖ call_id u64`` (40 bytes). The root call of a thread is 1."""

    thread: ThreadRef
    call_id: int

    def to_bytes(self) -> bytes:
        return self.thread.to_bytes() + self.call_id.to_bytes(8, "big")

    @classmethod
    def from_bytes(cls, raw: bytes) -> CallRef:
        if len(raw) != 40:
            raise InvalidWireId(f"CallRef needs 40 bytes, got {len(raw)}")
        return cls(ThreadRef.from_bytes(raw[:32]), int.from_bytes(raw[32:40], "big"))

    def wire(self) -> str:
        """``baml_call_1_`` + base64url-nopad(0x01 ‖ 40 bytes): 67 characters."""
        return CALL_WIRE_PREFIX + _b64(bytes([WIRE_VERSION]) + self.to_bytes())

    @classmethod
    def parse_wire(cls, text: str) -> CallRef:
        if not text.startswith(CALL_WIRE_PREFIX):
            raise InvalidWireId(f"call id must start with {CALL_WIRE_PREFIX!r}: {text!r}")
        raw = _unb64(text[len(CALL_WIRE_PREFIX) :], 41)
        if raw[0] != WIRE_VERSION:
            raise InvalidWireId(f"unknown call id version {raw[0]}")
        return cls.from_bytes(raw[1:])


def runtime_id_wire(runtime_id: bytes) -> str:
    """Host runtime token (``BoundaryId``): ``baml_id_1_`` + base64url-nopad(16 bytes).

    Unlike thread and call ids there is no version byte.
    """
    if len(runtime_id) != 16:
        raise InvalidWireId(f"runtime id needs 16 bytes, got {len(runtime_id)}")
    return RUNTIME_WIRE_PREFIX + _b64(runtime_id)


def parse_runtime_id_wire(text: str) -> bytes:
    if not text.startswith(RUNTIME_WIRE_PREFIX):
        raise InvalidWireId(f"runtime id must start with {RUNTIME_WIRE_PREFIX!r}: {text!r}")
    return _unb64(text[len(RUNTIME_WIRE_PREFIX) :], 16)


def value_cid_wire(cid: bytes) -> str:
    """SQL spelling of a value CID: ``bamlv_1_`` + 64 lowercase hex."""
    if len(cid) != 32:
        raise InvalidWireId(f"CID needs 32 bytes, got {len(cid)}")
    return VALUE_CID_WIRE_PREFIX + cid.hex()


def parse_value_cid_wire(text: str) -> bytes:
    if not text.startswith(VALUE_CID_WIRE_PREFIX) or not re.fullmatch(
        r"[0-9a-f]{64}", text[len(VALUE_CID_WIRE_PREFIX) :]
    ):
        raise InvalidWireId(f"value CID must be 'bamlv_1_' + 64 lowercase hex: {text!r}")
    return bytes.fromhex(text[len(VALUE_CID_WIRE_PREFIX) :])


def error_id_wire(thread: ThreadRef, unwind_ordinal: int) -> str:
    """Provider-chosen error id: ``<thread wire>#<unwind_ordinal>``."""
    return f"{thread.wire()}#{unwind_ordinal}"


def euid_hex(euid: bytes) -> str:
    """process_id / stream_id spelling: 32 lowercase hex."""
    return euid.hex()


def value_cid(codec: int, body: bytes) -> bytes:
    """``CID = SHA-256(b"baml-value-v1" ‖ codec u16 BE ‖ body)`` (reference facts §4.1)."""
    return hashlib.sha256(b"baml-value-v1" + codec.to_bytes(2, "big") + body).digest()
