"""The batch body decoders (``control.ingest.decompress`` and ``decode_arrow``): frames with and
without a declared content size, the uncompressed limit on both paths, and fuzzed bytes, which
only ever decode or raise the typed 400/413 errors."""

from __future__ import annotations

import pyarrow as pa
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest, PayloadTooLarge
from baml_studio.control.ingest import BatchLimits, decode_arrow, decompress


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
