"""Typed errors of the profiles-v1 byte formats.

Exception tree::

    BamlStudioError
    └── FormatError                      any problem with bytes we read or write
        ├── EncodeError                  a value cannot be encoded (StringTooLong, ...)
        └── SegmentReadError             bytes that do not decode (the spec's ``SegmentReadError``)
            ├── Truncated
            ├── InvalidChecksum
            ├── InvalidMagic
            ├── UnsupportedVersion       .version
            ├── InvalidKind              an unknown enum/tag byte or reserved bits set
            ├── InvalidUtf8
            ├── InvalidEvidence          .detail (an EvidenceIssue)
            ├── InvalidCct               .detail (a CctIssue)
            ├── TrailingBytes
            ├── EuidMismatch
            ├── MetaUnknownTag           .tag
            ├── MetaInvalidStatus
            ├── MetaInvalidHealth
            ├── MetaStreamStartedMisplaced
            ├── DataDuplicateGroup
            ├── DataEmptyGroup
            ├── DataGroupOrder
            ├── FunctionTableUnordered
            └── ValueCorrupt             a codec-1 value body that does not decode

Every decoder in :mod:`baml_studio.format` raises only subclasses of :class:`SegmentReadError`
for bad input, whatever the bytes are. All of them are terminal: re-reading the same bytes gives
the same error.
"""

from __future__ import annotations

import enum


class BamlStudioError(Exception):
    """Root of every error baml-studio raises on purpose."""


class FormatError(BamlStudioError):
    """A problem with bytes in one of our formats."""


class EncodeError(FormatError):
    """A value cannot be encoded in the wire format (for example a string over 64 KiB)."""


class SegmentReadError(FormatError):
    """Bytes that do not decode. ``remedy`` tells the user what to do about it."""

    remedy = "the file is corrupt; remove it or run `baml-studio store clean`"


class Truncated(SegmentReadError):
    """The input ended before a complete field."""


class InvalidChecksum(SegmentReadError):
    """The trailing SHA-256 (or a CAS object's CID) does not match the content."""


class InvalidMagic(SegmentReadError):
    """The first eight bytes are not the expected magic."""


class UnsupportedVersion(SegmentReadError):
    """A schema/format version this reader does not understand."""

    remedy = "written by another version of the profiler; run `baml-studio store clean`"

    def __init__(self, version: int, expected: int) -> None:
        super().__init__(f"unsupported version {version} (this reader supports {expected})")
        self.version = version
        self.expected = expected


class InvalidKind(SegmentReadError):
    """An enum or tag byte outside its valid set, or reserved bits set."""


class InvalidUtf8(SegmentReadError):
    """A string field that is not valid UTF-8."""


class CctIssue(enum.Enum):
    """Why a CCT section is invalid (``InvalidCct(..)``)."""

    RECORD_COUNT_MISMATCH = "record_count_mismatch"
    INVALID_CONTEXT_KEY = "invalid_context_key"
    INVALID_HEALTH = "invalid_health"
    LENGTH_MISMATCH = "length_mismatch"
    CONTEXT_KEY_COLLISION = "context_key_collision"


class EvidenceIssue(enum.Enum):
    """Why an evidence section is invalid (``InvalidEvidence(..)``)."""

    RECORD_COUNT_MISMATCH = "record_count_mismatch"
    UNKNOWN_TAG = "unknown_tag"
    BODY_LENGTH_MISMATCH = "body_length_mismatch"
    LENGTH_MISMATCH = "length_mismatch"
    INVALID_ERROR_CAPTURE = "invalid_error_capture"
    INVALID_TERMINAL_REF = "invalid_terminal_ref"
    THREAD_NAME_TOO_LONG = "thread_name_too_long"
    DUPLICATE_THREAD_START = "duplicate_thread_start"
    DUPLICATE_THREAD_END = "duplicate_thread_end"


class InvalidCct(SegmentReadError):
    """The CCT section of a data group is malformed."""

    def __init__(self, detail: CctIssue, message: str = "") -> None:
        super().__init__(
            f"invalid CCT section: {detail.value}" + (f": {message}" if message else "")
        )
        self.detail = detail


class InvalidEvidence(SegmentReadError):
    """The evidence section of a data group is malformed."""

    def __init__(self, detail: EvidenceIssue, message: str = "") -> None:
        super().__init__(
            f"invalid evidence section: {detail.value}" + (f": {message}" if message else "")
        )
        self.detail = detail


class TrailingBytes(SegmentReadError):
    """Bytes left over after a complete structure."""


class EuidMismatch(SegmentReadError):
    """A segment's process_euid differs from its stream directory name."""


class MetaUnknownTag(SegmentReadError):
    """A meta record tag that is not 0–3."""

    def __init__(self, tag: int) -> None:
        super().__init__(f"unknown meta record tag {tag} (valid: 0-3)")
        self.tag = tag


class MetaInvalidStatus(SegmentReadError):
    """A RootEnded status above 4."""


class MetaInvalidHealth(SegmentReadError):
    """A RootEnded health block that is not exactly 208 bytes."""


class MetaStreamStartedMisplaced(SegmentReadError):
    """StreamStarted somewhere other than record 0 of meta sequence 1."""


class DataDuplicateGroup(SegmentReadError):
    """Two groups with the same root in one data segment."""


class DataEmptyGroup(SegmentReadError):
    """A group whose CCT and evidence payloads are both empty."""


class DataGroupOrder(SegmentReadError):
    """Groups not sorted strictly ascending by root bytes."""


class FunctionTableUnordered(SegmentReadError):
    """FunctionTableV1 functions or files not strictly ascending by id (``Unordered``)."""


class ValueCorrupt(SegmentReadError):
    """A codec-1 value body that is not a valid ``BamlOutboundValue`` protobuf."""
