"""The batch body decoders (``control.ingest.decompress``, ``decode_arrow`` and
``decode_registered``): frames with and without a declared content size, the uncompressed limit on
both paths, fuzzed bytes, which only ever decode or raise the typed 400/413 errors, and the
registered-schema path, which reads exactly what the general reader and schema check accept."""

from __future__ import annotations

import pyarrow as pa
import pytest
import zstandard
from arrow_strategies import batches
from hypothesis import given, settings
from hypothesis import strategies as st

from arrow_damage import damage
from baml_studio.apierrors import BadRequest, PayloadTooLarge
from baml_studio.control.ingest import (
    BatchLimits,
    check_schema,
    decode_arrow,
    decode_registered,
    decompress,
    schema_message,
)
from baml_studio.control.schemas import PUBLIC_RELATION_NAMES, registered_schema
from baml_studio.projector.control_client import encode_batch

RELATION_NAMES = sorted(PUBLIC_RELATION_NAMES)


def _sized(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(raw)


def _unsized(raw: bytes) -> bytes:
    stream = zstandard.ZstdCompressor().compressobj()
    return stream.compress(raw) + stream.flush()


@pytest.mark.parametrize("frame", [_sized, _unsized], ids=["declared size", "no declared size"])
@pytest.mark.parametrize("raw", [b"", b"x", bytes(range(256)) * 40])
def test_both_frame_kinds_decode_to_their_bytes(frame, raw: bytes) -> None:
    assert decompress(frame(raw), BatchLimits()) == raw


@pytest.mark.parametrize("frame", [_sized, _unsized], ids=["declared size", "no declared size"])
def test_the_uncompressed_limit_holds_on_both_paths(frame) -> None:
    limits = BatchLimits(max_uncompressed_bytes=1000)
    assert decompress(frame(b"a" * 1000), limits) == b"a" * 1000
    with pytest.raises(PayloadTooLarge) as caught:
        decompress(frame(b"a" * 1001), limits)
    assert caught.value.code == "batch_too_large"


def test_a_frame_that_lies_about_its_size_or_is_cut_short_is_refused() -> None:
    body = _sized(b"w" * 5000)
    with pytest.raises(BadRequest) as caught:
        decompress(body[:-5], BatchLimits())
    assert caught.value.code == "invalid_body"


def test_only_the_first_frame_counts_as_before() -> None:
    assert decompress(_sized(b"one") + _sized(b"two"), BatchLimits()) == b"one"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512), st.booleans())
def test_fuzzed_bodies_decode_or_raise_typed_errors(data: bytes, as_frame: bool) -> None:
    body = _sized(data)[: len(data) // 2 + 4] if as_frame else data
    limits = BatchLimits(max_uncompressed_bytes=256)
    try:
        raw = decompress(body, limits)
    except (BadRequest, PayloadTooLarge):
        return
    assert len(raw) <= 256
    try:
        table = decode_arrow(raw)
    except BadRequest as exc:
        assert exc.code == "invalid_body"
    else:
        assert isinstance(table, pa.Table)


def _stream(table: pa.Table, chunk: int | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue().to_pybytes()


def _general(relation: str, raw: bytes) -> tuple[pa.Table, bool] | None:
    """What the general path accepts: the stream read and its schema checked (``None``: refused)."""
    try:
        table = decode_arrow(raw)
        return table, check_schema(relation, table.schema)
    except BadRequest:
        return None


@pytest.mark.parametrize("relation", RELATION_NAMES)
def test_the_projectors_encoder_writes_the_registered_schema_message(relation: str) -> None:
    """The fast path is only worth having if what the projector sends takes it."""
    table = registered_schema(relation).empty_table()
    body = encode_batch(table).body
    raw = decompress(body, BatchLimits())
    assert raw.startswith(schema_message(relation))
    read = decode_registered(relation, raw)
    assert read is not None and read.equals(table)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_registered_path_reads_what_the_general_reader_reads(data: st.DataObject) -> None:
    relation = data.draw(st.sampled_from(RELATION_NAMES))
    table = data.draw(batches(registered_schema(relation)))
    raw = _stream(table, data.draw(st.none() | st.integers(1, 5)))
    read = decode_registered(relation, raw)
    general = _general(relation, raw)
    assert read is not None and general is not None
    assert general[1]  # the registered schema exactly, so no cast follows
    assert read.equals(general[0]) and read.equals(table)
    assert read.schema.equals(general[0].schema, check_metadata=True)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_damaged_streams_take_the_registered_path_only_where_the_general_one_agrees(
    data: st.DataObject,
) -> None:
    """Flipped, cut, spliced or extended bytes (mostly after the schema message, where the
    registered path reads on its own): whatever it returns, the general reader returns too,
    with the registered schema exactly; what it declines is left to the general path."""
    relation = data.draw(st.sampled_from(RELATION_NAMES))
    table = data.draw(batches(registered_schema(relation)))
    raw = _stream(table, data.draw(st.none() | st.integers(1, 3)))
    start = data.draw(st.sampled_from([0, len(schema_message(relation))]))
    damaged = damage(data, raw, start)
    read = decode_registered(relation, damaged)
    if read is None:
        return
    general = _general(relation, damaged)
    assert general is not None and general[1]
    assert read.equals(general[0])


def test_field_metadata_or_another_schema_leaves_the_general_path_to_decide() -> None:
    schema = registered_schema("calls_v1")
    tagged = schema.with_metadata({"origin": "test"})
    assert decode_registered("calls_v1", _stream(tagged.empty_table())) is None
    assert (
        decode_registered("calls_v1", _stream(registered_schema("threads_v1").empty_table()))
        is None
    )
    assert decode_registered("calls_v1", b"") is None
