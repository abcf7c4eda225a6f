"""BAMLPCK1: round trip, golden vectors read from docs/formats.md, and a fuzzed decoder."""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.format.cas import decode_cas_object, encode_cas_object
from baml_studio.publisher.errors import (
    PackBadMagic,
    PackEntryInvalid,
    PackError,
    PackFrameInvalid,
    PackManifestInvalid,
    PackUnsupportedVersion,
)
from baml_studio.publisher.pack import (
    _HEAD,
    PACK_MAGIC,
    PACK_VERSION,
    canonical_json,
    decode_pack,
    decode_pack_body,
    decompress_frame,
    encode_pack,
    pack_body,
    pack_body_verified,
)
from json_strategies import HOSTILE_BYTES, JSON_VALUES, shaped

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats.md"
bodies = st.lists(st.binary(max_size=200), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(bodies)
def test_round_trip(raw_bodies: list[bytes]) -> None:
    files = [encode_cas_object(1, b) for b in raw_bodies]
    pack = decode_pack(encode_pack(files))
    assert {e.raw for e in pack.entries} == set(files)
    assert [e.cid for e in pack.entries] == sorted({e.cid for e in pack.entries})
    assert {e.decode().body for e in pack.entries} == set(raw_bodies)
    for e in pack.entries:  # the verified body, the same object as decoding the file gives
        assert e.decode() == decode_cas_object(e.raw) and e.body == e.decode().body


def _golden_section() -> str:
    text = DOCS.read_text()
    return text[text.index("## Value packs (BAMLPCK1)") :]


@settings(max_examples=80, deadline=None)
@given(bodies, st.lists(st.text(max_size=70), max_size=3))
def test_the_manifest_is_canonical_json(raw_bodies: list[bytes], odd: list[str]) -> None:
    # the manifest is written directly for speed; it must stay byte-for-byte canonical JSON,
    # also when a caller passes a checksum that is not hex (then it falls back to json.dumps)
    files = sorted({hashlib.sha256(encode_cas_object(1, b)).digest(): encode_cas_object(1, b)
                    for b in raw_bodies}.items())  # fmt: skip
    sums = [hashlib.sha256(raw).hexdigest() for _, raw in files]
    sums[: len(odd)] = odd[: len(sums)]
    body = pack_body_verified([(cid, raw, s) for (cid, raw), s in zip(files, sums, strict=True)])
    rows, offset = [], 0
    for (cid, raw), digest in zip(files, sums, strict=True):
        rows.append({"cid": cid.hex(), "codec": 1, "length": len(raw), "offset": offset,
                     "sha256": digest})  # fmt: skip
        offset += len(raw)
    manifest = canonical_json({"entries": rows, "version": PACK_VERSION})
    assert body[14 : 14 + len(manifest)] == manifest
    assert int.from_bytes(body[10:14], "big") == len(manifest)


def test_golden_vector_matches_docs() -> None:
    section = _golden_section()
    files = [encode_cas_object(1, b"alpha"), encode_cas_object(1, b"beta")]
    body = pack_body(files)
    body_sha = re.search(r"uncompressed pack: (\d+) bytes, SHA-256 `([0-9a-f]{64})`", section)
    assert body_sha and int(body_sha.group(1)) == len(body)
    assert hashlib.sha256(body).hexdigest() == body_sha.group(2)
    hex_block = re.search(r"```pack-hex\n([0-9a-f\n]+)```", section)
    assert hex_block
    golden = bytes.fromhex(hex_block.group(1).replace("\n", ""))
    z_sha = re.search(
        r"compressed pack \(zstandard [^)]*\): (\d+) bytes, SHA-256 `([0-9a-f]{64})`", section
    )
    assert z_sha and hashlib.sha256(golden).hexdigest() == z_sha.group(2)
    assert decompress_frame(golden) == body
    assert encode_pack(files, 3) == golden


def _frame(body: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=True).compress(body)


def test_typed_errors_for_each_rule() -> None:
    good = pack_body([encode_cas_object(1, b"x"), encode_cas_object(1, b"y")])
    with pytest.raises(PackBadMagic):
        decode_pack_body(b"BAMLPCK2" + good[8:])
    with pytest.raises(PackUnsupportedVersion):
        decode_pack_body(good[:8] + b"\x00\x02" + good[10:])
    with pytest.raises(PackManifestInvalid):
        decode_pack_body(good + b"\x00")
    flipped = bytearray(good)
    flipped[-40] ^= 1
    with pytest.raises(PackEntryInvalid):
        decode_pack_body(bytes(flipped))
    with pytest.raises(PackFrameInvalid):
        decode_pack(_frame(good) + b"junk")
    with pytest.raises(PackFrameInvalid):
        decode_pack(good)
    with pytest.raises(PackFrameInvalid):
        decode_pack(_frame(good), max_bytes=10)
    with pytest.raises(PackEntryInvalid):
        pack_body([encode_cas_object(2, b"table")])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data: bytes) -> None:
    for attempt in (data, _frame(data)):
        with contextlib.suppress(PackError):
            decode_pack(attempt)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_pack(data: st.DataObject) -> None:
    body = bytearray(pack_body([encode_cas_object(1, b"one"), encode_cas_object(1, b"two!")]))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(body) - 1))
        body[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    for candidate in (bytes(body), bytes(body[:cut])):
        with contextlib.suppress(PackError):
            decode_pack(_frame(candidate))


def _with_manifest(manifest: bytes) -> bytes:
    return _HEAD.pack(PACK_MAGIC, PACK_VERSION, len(manifest)) + manifest


@pytest.mark.parametrize("manifest", [b"[" * 100_000, b'{"a":' * 3000 + b"1" + b"}" * 3000])
def test_a_manifest_nested_too_deeply_is_invalid(manifest: bytes) -> None:
    for decode, data in ((decode_pack_body, _with_manifest(manifest)),
                         (decode_pack, _frame(_with_manifest(manifest)))):  # fmt: skip
        with pytest.raises(PackManifestInvalid, match="too deeply"):
            decode(data)


ROW = shaped(
    {
        "cid": st.sampled_from(["ab" * 32, "AB" * 32]),
        "codec": st.integers(0, 2),
        "length": st.integers(),
        "offset": st.integers(),
        "sha256": st.just("cd" * 32),
    }
)


@settings(max_examples=200, deadline=None)
@given(
    HOSTILE_BYTES
    | shaped({"entries": st.lists(ROW, max_size=3), "version": st.just(PACK_VERSION)}).map(
        canonical_json
    )
    | JSON_VALUES.map(canonical_json),
    st.binary(max_size=100),
)
def test_fuzz_manifest_only_pack_errors(manifest: bytes, entries: bytes) -> None:
    with contextlib.suppress(PackError):
        decode_pack_body(_with_manifest(manifest) + entries)
