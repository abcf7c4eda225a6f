"""encode → decode is the identity for every record, fact, section and segment."""

from __future__ import annotations

import pytest
from format_strategies import (
    FACT_STRATEGIES,
    META_STRATEGIES,
    cct_sections,
    data_segments,
    fact_lists,
    function_tables,
    meta_segments,
    thread_refs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.format.cas import decode_cas_object, encode_cas_object
from baml_studio.format.cct import decode_cct_payload, encode_cct_payload
from baml_studio.format.data import decode_data_segment, encode_data_segment
from baml_studio.format.evidence import decode_evidence_payload, encode_evidence_payload
from baml_studio.format.function_table import (
    FunctionTable,
    decode_function_table,
    encode_function_table,
)
from baml_studio.format.ids import value_cid
from baml_studio.format.meta import decode_meta_segment, encode_meta_segment
from baml_studio.format.records import (
    CctSection,
    DataSegment,
    Fact,
    MetaRecord,
    MetaSegment,
    RootEnded,
    StreamStarted,
)


@pytest.mark.parametrize("kind", sorted(META_STRATEGIES))
@given(data=st.data())
def test_each_meta_record_kind_round_trips(kind: str, data: st.DataObject) -> None:
    record: MetaRecord = data.draw(META_STRATEGIES[kind])
    sequence = 1 if isinstance(record, StreamStarted) else data.draw(st.integers(0, 10))
    seg = MetaSegment(sequence, b"\x07" * 16, 3, (record,))
    raw = encode_meta_segment(seg)
    assert decode_meta_segment(raw, expected_euid=b"\x07" * 16) == seg
    if isinstance(record, RootEnded):
        assert len(raw) - 58 - 32 == 5 + 278


@given(meta_segments())
def test_meta_segment_round_trips(seg: MetaSegment) -> None:
    assert decode_meta_segment(encode_meta_segment(seg)) == seg


@pytest.mark.parametrize("kind", sorted(FACT_STRATEGIES))
@given(data=st.data())
def test_each_fact_kind_round_trips(kind: str, data: st.DataObject) -> None:
    fact = data.draw(FACT_STRATEGIES[kind])
    assert decode_evidence_payload(encode_evidence_payload([fact]), 1) == (fact,)


@given(fact_lists)
def test_evidence_payload_round_trips(facts: tuple[Fact, ...]) -> None:
    payload = encode_evidence_payload(facts)
    assert decode_evidence_payload(payload, len(facts)) == facts


@given(cct_sections)
def test_cct_payload_round_trips(section: CctSection) -> None:
    payload = encode_cct_payload(section)
    count = len(section.contexts) + len(section.overflows)
    assert decode_cct_payload(payload, count, section.health) == section


@settings(max_examples=150)
@given(data_segments())
def test_data_segment_round_trips(seg: DataSegment) -> None:
    raw = encode_data_segment(seg)
    assert decode_data_segment(raw, expected_euid=seg.process_euid) == seg


@settings(max_examples=100)
@given(data_segments(), st.data())
def test_data_segment_root_filter_returns_exactly_the_wanted_groups(
    seg: DataSegment, data: st.DataObject
) -> None:
    extra = data.draw(st.lists(thread_refs, max_size=2))
    chosen = [g.root for g in seg.groups if data.draw(st.booleans())] + extra
    decoded = decode_data_segment(encode_data_segment(seg), roots=chosen)
    assert decoded.groups == tuple(g for g in seg.groups if g.root in chosen)


@given(function_tables())
def test_function_table_round_trips(table: FunctionTable) -> None:
    assert decode_function_table(encode_function_table(table)) == table


@given(st.integers(0, 0xFFFF), st.binary(max_size=300))
def test_cas_object_round_trips(codec: int, body: bytes) -> None:
    obj = decode_cas_object(encode_cas_object(codec, body))
    assert (obj.codec, obj.cid, obj.body) == (codec, value_cid(codec, body), body)
