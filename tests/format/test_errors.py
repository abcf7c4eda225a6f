"""Every named error of the spec's ``SegmentReadError`` enum (facts §2), from a crafted input."""

from __future__ import annotations

import hashlib

import pytest
from format_fixtures import (
    CALL,
    EUID,
    KEY,
    ROOT,
    ROOT2,
    TUPLE,
    be,
    data_file,
    group_bytes,
    meta_file,
    record,
    rich_data_segment,
    rich_meta_segment,
)

from baml_studio.format.binio import Reader, strip_checksum
from baml_studio.format.cas import CAS_MAGIC, decode_cas_object, encode_cas_object
from baml_studio.format.cct import decode_cct_payload, encode_cct_payload
from baml_studio.format.data import decode_data_segment, encode_data_segment
from baml_studio.format.errors import (
    CctIssue,
    DataDuplicateGroup,
    DataEmptyGroup,
    DataGroupOrder,
    EuidMismatch,
    EvidenceIssue,
    FunctionTableUnordered,
    InvalidCct,
    InvalidChecksum,
    InvalidEvidence,
    InvalidKind,
    InvalidMagic,
    InvalidUtf8,
    MetaInvalidHealth,
    MetaInvalidStatus,
    MetaStreamStartedMisplaced,
    MetaUnknownTag,
    SegmentReadError,
    TrailingBytes,
    Truncated,
    UnsupportedVersion,
)
from baml_studio.format.evidence import (
    decode_evidence_payload,
    encode_fact,
)
from baml_studio.format.function_table import decode_function_table
from baml_studio.format.meta import decode_meta_segment, encode_meta_record, encode_meta_segment
from baml_studio.format.records import (
    DATA_MAGIC,
    CctContext,
    CctCounters,
    CctSection,
    EdgeKind,
    ErrorCapture,
    ErrorCaptureId,
    ErrorKind,
    ErrorSource,
    ExecutionHealth,
    Fact,
    FunctionEndStatus,
    NormalContext,
    RootEnded,
    RootStatus,
    SpanEnd,
    SpanStart,
    StreamStarted,
    TerminalErrorRef,
    ThreadEnd,
    ThreadEndStatus,
    ThreadKind,
    ThreadStart,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)

ROOT_ENDED = RootEnded(ROOT, 9, RootStatus.SUCCEEDED, 0, 0, 0, 0, ExecutionHealth())
ROOT_ENDED_BODY = encode_meta_record(ROOT_ENDED)[5:]
SPAN_END = SpanEnd(CALL, 5, FunctionEndStatus.OK, 3)
OCCURRENCE = ValueOccurrence(
    CALL, NormalContext(KEY), ValueRole.INPUT, ValueLost(ValueLossReason.CAS_CONFLICT)
)
CCT = CctSection(0, (CctContext(KEY, TUPLE, CctCounters(1, 1, 1)),))


def patched(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value) :]


def meta_with(body: bytes, tag: int = 3) -> bytes:
    return meta_file(record(tag, body), 1)


def evidence(*facts: bytes, count: int | None = None, tail: bytes = b"") -> bytes:
    return be(len(facts) if count is None else count, 8) + b"".join(facts) + tail


# --- checksum, framing, magic, version ----------------------------------------------------------


def test_truncated() -> None:
    with pytest.raises(Truncated):
        decode_meta_segment(b"\x00" * 31)
    with pytest.raises(Truncated):  # header cut short behind a valid checksum
        decode_meta_segment(
            meta_file(b"", 0)[:20] + hashlib.sha256(meta_file(b"", 0)[:20]).digest()
        )
    with pytest.raises(Truncated):  # payload_len larger than the file
        decode_meta_segment(meta_file(b"", 0, payload_len=1))
    with pytest.raises(Truncated):
        Reader(b"\x00\x00\x00\x05abc").string()


def test_invalid_checksum() -> None:
    raw = encode_meta_segment(rich_meta_segment())
    with pytest.raises(InvalidChecksum):
        decode_meta_segment(patched(raw, 20, b"\xff"))
    with pytest.raises(InvalidChecksum):
        strip_checksum(b"\x00" * 32)


def test_invalid_magic() -> None:
    with pytest.raises(InvalidMagic):
        decode_meta_segment(meta_file(b"", 0, magic=DATA_MAGIC))
    with pytest.raises(InvalidMagic):
        decode_data_segment(data_file(b"", 0, magic=b"BAMLMET1"))


@pytest.mark.parametrize("version", [0, 1, 3, 0xFFFF])
def test_unsupported_version(version: int) -> None:
    with pytest.raises(UnsupportedVersion) as meta_err:
        decode_meta_segment(meta_file(b"", 0, version=version))
    assert (meta_err.value.version, meta_err.value.expected) == (version, 2)
    with pytest.raises(UnsupportedVersion):
        decode_data_segment(data_file(b"", 0, version=version))


def test_trailing_bytes() -> None:
    with pytest.raises(TrailingBytes):  # after the payload, before the checksum
        decode_meta_segment(meta_file(b"", 0, tail=b"\x00"))
    with pytest.raises(TrailingBytes):  # inside a record body
        decode_meta_segment(meta_with(ROOT_ENDED_BODY + b"\x00"))
    with pytest.raises(TrailingBytes):  # after the last record
        decode_meta_segment(meta_file(record(3, ROOT_ENDED_BODY) + b"\x00", 1))
    with pytest.raises(TrailingBytes):
        decode_data_segment(data_file(group_bytes(ROOT, evidence=b"x" * 8), 1, tail=b"\x00"))


def test_euid_mismatch() -> None:
    raw = encode_meta_segment(rich_meta_segment())
    assert decode_meta_segment(raw, expected_euid=EUID).process_euid == EUID
    with pytest.raises(EuidMismatch):
        decode_meta_segment(raw, expected_euid=b"\x00" * 16)
    with pytest.raises(EuidMismatch):
        decode_data_segment(encode_data_segment(rich_data_segment()), expected_euid=b"\x00" * 16)


# --- meta records -------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", [4, 7, 255])
def test_meta_unknown_tag(tag: int) -> None:
    with pytest.raises(MetaUnknownTag) as err:
        decode_meta_segment(meta_with(b"", tag=tag))
    assert err.value.tag == tag


@pytest.mark.parametrize("status", [5, 6, 255])
def test_meta_invalid_status(status: int) -> None:
    with pytest.raises(MetaInvalidStatus):
        decode_meta_segment(meta_with(patched(ROOT_ENDED_BODY, 40, bytes([status]))))


@pytest.mark.parametrize("health_len", [0, 200, 207, 209, 216])
def test_meta_invalid_health(health_len: int) -> None:
    body = ROOT_ENDED_BODY[:66] + be(health_len, 4) + b"\x00" * health_len
    with pytest.raises(MetaInvalidHealth):
        decode_meta_segment(meta_with(body))


@pytest.mark.parametrize("flags", [0b10, 0x80, 0xFF])
def test_root_ended_reserved_flag_bits_are_invalid_kind(flags: int) -> None:
    with pytest.raises(InvalidKind):
        decode_meta_segment(meta_with(patched(ROOT_ENDED_BODY, 41, bytes([flags]))))


def test_meta_stream_started_misplaced() -> None:
    started = encode_meta_record(StreamStarted(1, 2, "0.17.0", "linux-x86_64"))
    ended = record(3, ROOT_ENDED_BODY)
    assert decode_meta_segment(meta_file(started + ended, 2, sequence=1)).sequence == 1
    with pytest.raises(MetaStreamStartedMisplaced):
        decode_meta_segment(meta_file(ended + started, 2, sequence=1))
    with pytest.raises(MetaStreamStartedMisplaced):
        decode_meta_segment(meta_file(started, 1, sequence=2))


def test_invalid_utf8_and_invalid_option_tag() -> None:
    body = be(1, 4) + be(2, 8) + be(2, 4) + b"\xff\xfe" + be(0, 4)
    with pytest.raises(InvalidUtf8):
        decode_meta_segment(meta_with(body, tag=0))
    engine = be(1, 8) + b"\x11" * 16 + b"\x02"
    with pytest.raises(InvalidKind):
        decode_meta_segment(meta_with(engine, tag=1))


def test_meta_record_count_larger_than_payload_is_truncated() -> None:
    with pytest.raises(Truncated):
        decode_meta_segment(meta_file(record(3, ROOT_ENDED_BODY), (1 << 64) - 1))
    with pytest.raises(Truncated):  # a body_len running past the payload
        decode_meta_segment(meta_file(record(3, ROOT_ENDED_BODY, body_len=10_000), 1))


# --- CCT ------------------------------------------------------------------------------------------


def test_invalid_cct_each_issue() -> None:
    payload = encode_cct_payload(CCT)
    with pytest.raises(InvalidCct) as err:
        decode_cct_payload(payload, 2, 0)
    assert err.value.detail is CctIssue.RECORD_COUNT_MISMATCH
    with pytest.raises(InvalidCct) as err:
        decode_cct_payload(patched(payload, 8, bytes([payload[8] ^ 1])), 1, 0)
    assert err.value.detail is CctIssue.INVALID_CONTEXT_KEY
    with pytest.raises(InvalidCct) as err:
        decode_cct_payload(payload, 1, 0x80)
    assert err.value.detail is CctIssue.INVALID_HEALTH
    with pytest.raises(InvalidCct) as err:
        decode_cct_payload(payload + b"\x00", 1, 0)
    assert err.value.detail is CctIssue.LENGTH_MISMATCH


def test_invalid_cct_health_in_a_data_group_header() -> None:
    raw = data_file(group_bytes(ROOT, health=0x08, evidence=evidence()), 1)
    with pytest.raises(InvalidCct) as err:
        decode_data_segment(raw)
    assert err.value.detail is CctIssue.INVALID_HEALTH


def test_cct_count_prechecks_are_truncated() -> None:
    with pytest.raises(Truncated):
        decode_cct_payload(be(2, 8) + b"\x00" * 200, 2, 0)  # 2 contexts need ≥ 274 bytes
    with pytest.raises(Truncated):
        decode_cct_payload(be(0, 8) + be(2, 8) + b"\x00" * 200, 2, 0)  # 2 rows need ≥ 212
    for cut in range(len(encode_cct_payload(CCT))):
        with pytest.raises(Truncated):
            decode_cct_payload(encode_cct_payload(CCT)[:cut], 1, 0)


def test_cct_invalid_edge_is_invalid_kind() -> None:
    payload = be(0, 8) + be(1, 8) + b"\x00\x03" + b"\x00" * 104
    with pytest.raises(InvalidKind):
        decode_cct_payload(payload, 1, 0)


# --- evidence -------------------------------------------------------------------------------------


def test_invalid_evidence_count_tag_and_lengths() -> None:
    span_end = encode_fact(SPAN_END)
    cases = {
        EvidenceIssue.RECORD_COUNT_MISMATCH: (evidence(span_end), 2),
        EvidenceIssue.UNKNOWN_TAG: (evidence(record(8, b"")), 1),
        EvidenceIssue.BODY_LENGTH_MISMATCH: (evidence(record(1, span_end[5:] + b"\x00")), 1),
        EvidenceIssue.LENGTH_MISMATCH: (evidence(span_end, tail=b"\x00"), 1),
    }
    for issue, (payload, count) in cases.items():
        with pytest.raises(InvalidEvidence) as err:
            decode_evidence_payload(payload, count)
        assert err.value.detail is issue
    with pytest.raises(InvalidEvidence) as err:  # body shorter than its fields
        decode_evidence_payload(evidence(record(1, span_end[5:-1])), 1)
    assert err.value.detail is EvidenceIssue.BODY_LENGTH_MISMATCH


def test_evidence_count_precheck_is_truncated() -> None:
    with pytest.raises(Truncated):
        decode_evidence_payload(be(3, 8) + b"\x00" * 14, 3)


def test_invalid_nested_error_records() -> None:
    capture = ErrorCapture(
        ErrorCaptureId(ROOT, 1), CALL, NormalContext(KEY), 7, None, ErrorKind.FRESH,
        ErrorSource.BYTECODE, ValueLost(ValueLossReason.COPY_FAILED),
    )  # fmt: skip
    terminal = TerminalErrorRef(CALL, ErrorCaptureId(ROOT, 1))
    for fact, issue in (
        (capture, EvidenceIssue.INVALID_ERROR_CAPTURE),
        (terminal, EvidenceIssue.INVALID_TERMINAL_REF),
    ):
        good = encode_fact(fact)
        for offset, value in ((5 + 7, b"2"), (5 + 9, b"\x02")):  # magic digit, version
            with pytest.raises(InvalidEvidence) as err:
                decode_evidence_payload(evidence(patched(good, offset, value)), 1)
            assert err.value.detail is issue


def test_thread_name_too_long() -> None:
    body = ROOT.to_bytes() + b"\x00\x00\x00" + be(1, 8) + b"\x00" + be(257, 4) + b"n" * 257
    with pytest.raises(InvalidEvidence) as err:
        decode_evidence_payload(evidence(record(6, body)), 1)
    assert err.value.detail is EvidenceIssue.THREAD_NAME_TOO_LONG
    ok = ROOT.to_bytes() + b"\x00\x00\x00" + be(1, 8) + b"\x00" + be(256, 4) + b"n" * 256
    (decoded,) = decode_evidence_payload(evidence(record(6, ok)), 1)
    assert isinstance(decoded, ThreadStart) and decoded.name == "n" * 256


def test_duplicate_thread_start_and_end() -> None:
    start = encode_fact(ThreadStart(ROOT, None, None, None, 1, ThreadKind.ROOT, "main"))
    end = encode_fact(ThreadEnd(ROOT, 2, ThreadEndStatus.COMPLETED))
    other = encode_fact(ThreadEnd(ROOT2, 2, ThreadEndStatus.COMPLETED))
    assert len(decode_evidence_payload(evidence(start, end, other), 3)) == 3
    with pytest.raises(InvalidEvidence) as err:
        decode_evidence_payload(evidence(start, end, start), 3)
    assert err.value.detail is EvidenceIssue.DUPLICATE_THREAD_START
    with pytest.raises(InvalidEvidence) as err:
        decode_evidence_payload(evidence(end, other, end), 3)
    assert err.value.detail is EvidenceIssue.DUPLICATE_THREAD_END


@pytest.mark.parametrize("offset", [-2, -3])  # roles, selection_reasons (before opt runtime)
@pytest.mark.parametrize("value", [0x08, 0x10, 0x80])
def test_bits_above_two_are_invalid_kind(offset: int, value: int) -> None:
    span = SpanStart(CALL, None, ROOT, NormalContext(KEY), 7, None, EdgeKind.ROOT, 1, 1, 1)
    good = encode_fact(span)
    with pytest.raises(InvalidKind):
        decode_evidence_payload(evidence(patched(good, len(good) + offset, bytes([value]))), 1)


@pytest.mark.parametrize(
    ("fact", "offset", "value"),
    [
        (SPAN_END, 5 + 40 + 8, 4),  # FunctionEndStatus
        (ThreadEnd(ROOT, 2, ThreadEndStatus.ERRORED), 5 + 32 + 8, 3),  # ThreadEndStatus
        (TerminalErrorRef(CALL, ErrorCaptureId(ROOT, 1)), 5 + 10 + 40, 2),  # target tag
        (OCCURRENCE, 5 + 40, 2),  # ContextRef tag
        (OCCURRENCE, 5 + 40 + 33, 2),  # ValueRole
        (OCCURRENCE, 5 + 40 + 33 + 1, 2),  # ValueState tag
        (OCCURRENCE, 5 + 40 + 33 + 1 + 1, 11),  # ValueLossReason
    ],
)
def test_enum_and_tag_out_of_range_is_invalid_kind(fact: Fact, offset: int, value: int) -> None:
    good = encode_fact(fact)
    assert decode_evidence_payload(evidence(good), 1) == (fact,)
    with pytest.raises(InvalidKind):
        decode_evidence_payload(evidence(patched(good, offset, bytes([value]))), 1)


# --- data segments --------------------------------------------------------------------------------


def test_data_duplicate_empty_and_order() -> None:
    ev = evidence(encode_fact(SPAN_END))
    one = group_bytes(ROOT, evidence=ev, evidence_count=1)
    two = group_bytes(ROOT2, evidence=ev, evidence_count=1)
    assert len(decode_data_segment(data_file(one + two, 2)).groups) == 2
    with pytest.raises(DataDuplicateGroup):
        decode_data_segment(data_file(one + one, 2))
    with pytest.raises(DataGroupOrder):
        decode_data_segment(data_file(two + one, 2))
    with pytest.raises(DataEmptyGroup):
        decode_data_segment(data_file(group_bytes(ROOT), 1))


def test_data_order_is_checked_for_skipped_groups_too() -> None:
    ev = evidence(encode_fact(SPAN_END))
    one = group_bytes(ROOT, evidence=ev, evidence_count=1)
    two = group_bytes(ROOT2, evidence=ev, evidence_count=1)
    with pytest.raises(DataGroupOrder):
        decode_data_segment(data_file(two + one, 2), roots=[ROOT])
    with pytest.raises(DataEmptyGroup):
        decode_data_segment(data_file(group_bytes(ROOT) + two, 2), roots=[ROOT2])


def test_skipped_groups_payloads_are_not_decoded() -> None:
    garbage = group_bytes(ROOT, evidence=b"\xff" * 40, evidence_count=1)
    good = group_bytes(ROOT2, evidence=evidence(encode_fact(SPAN_END)), evidence_count=1)
    raw = data_file(garbage + good, 2)
    assert decode_data_segment(raw, roots=[ROOT2]).groups[0].evidence == (SPAN_END,)
    with pytest.raises(SegmentReadError):
        decode_data_segment(raw)


def test_data_group_count_mismatch() -> None:
    one = group_bytes(ROOT, evidence=evidence(encode_fact(SPAN_END)), evidence_count=1)
    with pytest.raises(TrailingBytes):
        decode_data_segment(data_file(one, 0))
    with pytest.raises(Truncated):
        decode_data_segment(data_file(one, 2))


def test_data_cct_record_count_with_empty_payload_is_truncated() -> None:
    raw = data_file(group_bytes(ROOT, cct_count=1, evidence=evidence()), 1)
    with pytest.raises(Truncated):
        decode_data_segment(raw)


# --- CAS and function tables ---------------------------------------------------------------------


def test_cas_errors() -> None:
    good = encode_cas_object(1, b"body")
    body = good[:-32]
    for mutated, error in (
        (b"BAMLVAL2" + body[8:], InvalidMagic),
        (patched(body, 8, be(2, 2)), UnsupportedVersion),
        (patched(body, 10, be(2, 2)), InvalidChecksum),  # codec changed: CID no longer matches
        (patched(body, 20, b"\x00"), InvalidChecksum),
        (patched(body, 12, be(5, 8)), Truncated),
        (patched(body, 12, be(3, 8)), TrailingBytes),
    ):
        with pytest.raises(error):
            decode_cas_object(mutated + hashlib.sha256(mutated).digest())
    assert good.startswith(CAS_MAGIC)


def test_function_table_errors() -> None:
    def entry(function_id: int) -> bytes:
        return be(function_id, 4) + be(0, 4) + be(0, 4) + b"\x00\xff\x00\xff\x00\x00\x00" + be(0, 2)

    with pytest.raises(FunctionTableUnordered):
        decode_function_table(be(1, 2) + be(2, 4) + entry(2) + entry(1) + be(0, 4))
    with pytest.raises(FunctionTableUnordered):
        decode_function_table(be(1, 2) + be(2, 4) + entry(1) + entry(1) + be(0, 4))
    files = be(2, 4) + be(3, 4) + be(0, 4) + be(3, 4) + be(0, 4)
    with pytest.raises(FunctionTableUnordered):
        decode_function_table(be(1, 2) + be(0, 4) + files)
    with pytest.raises(UnsupportedVersion):
        decode_function_table(be(2, 2) + be(0, 4) + be(0, 4))
    with pytest.raises(TrailingBytes):
        decode_function_table(be(1, 2) + be(0, 4) + be(0, 4) + b"\x00")
    table = decode_function_table(be(1, 2) + be(1, 4) + entry(9) + be(0, 4))
    assert table.functions[0].kind is None and table.functions[0].origin is None
    with pytest.raises(InvalidKind):
        decode_function_table(be(1, 2) + be(1, 4) + patched(entry(9), 12, b"\x02") + be(0, 4))


def test_unknown_kind_and_origin_codes_decode_to_none() -> None:
    raw = be(1, 2) + be(1, 4) + be(1, 4) + be(0, 4) + be(0, 4) + b"\x00\x07\x00\x05\x00\x00\x00"
    table = decode_function_table(raw + be(0, 2) + be(0, 4))
    assert (table.functions[0].kind, table.functions[0].origin) == (None, None)


def test_every_error_class_is_a_segment_read_error() -> None:
    for cls in (
        Truncated, InvalidChecksum, InvalidMagic, UnsupportedVersion, InvalidKind, InvalidUtf8,
        InvalidEvidence, InvalidCct, TrailingBytes, EuidMismatch, MetaUnknownTag,
        MetaInvalidStatus, MetaInvalidHealth, MetaStreamStartedMisplaced, DataDuplicateGroup,
        DataEmptyGroup, DataGroupOrder, FunctionTableUnordered,
    ):  # fmt: skip
        assert issubclass(cls, SegmentReadError)
