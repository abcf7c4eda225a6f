"""Evidence objects that pass their outer checks and fail their content checks, for the
quarantine tests of the worker and the Lambda handler.

* :func:`malformed_packs`: value packs in one well-formed zstd frame (content size declared,
  nothing trailing) whose decompressed content ``publisher/pack.py``'s ``decode_pack`` rejects:
  a bad header, a manifest that is not canonical or lies about an entry, an entry whose bytes
  fail their sha256 or hold another CID, bytes after the last entry.
* :func:`malformed_metas`: meta segments whose trailing SHA-256 is correct (computed over the
  bad bytes) but whose header or records are malformed: an unknown tag, a status out of
  range, a record body longer than its fields, a misplaced StreamStarted, a record count the
  payload cannot hold, an unsupported version, another stream's euid or sequence.

Each is stored under a fresh stream of :data:`SCOPE` (no healthy execution depends on it) and
names a fragment its quarantine reason must contain: the error found past the outer checks.
Building one checks its premise (the frame decompresses, the checksum passes, the content is
refused). :func:`assert_quarantined` checks the quarantine contract for a set of them.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from projector_e2e_rig import Ingest
from projector_fixtures import SCOPE

from baml_studio.format.binio import with_checksum
from baml_studio.format.cas import CODEC_VALUE, encode_cas_object
from baml_studio.format.errors import InvalidChecksum, SegmentReadError
from baml_studio.format.ids import ThreadRef
from baml_studio.format.meta import TAG_ROOT_STARTED, encode_meta_record
from baml_studio.format.records import (
    META_MAGIC,
    SCHEMA_VERSION,
    ExecutionHealth,
    RootEnded,
    RootStarted,
    RootStatus,
    StreamStarted,
)
from baml_studio.gateway.keys import evidence_prefix, pack_key, segment_key
from baml_studio.objectstore.port import ObjectStore
from baml_studio.publisher import Publisher
from baml_studio.publisher.errors import PackError
from baml_studio.publisher.pack import (
    PACK_MAGIC,
    PACK_VERSION,
    canonical_json,
    compress,
    decode_pack,
    decompress_frame,
)
from baml_studio.queue.port import Message
from baml_studio.store.segments import decode_meta_file


@dataclass(frozen=True)
class Malformed:
    name: str
    key: str
    body: bytes
    """The object as stored in the bucket (one zstd frame)."""
    reason: str
    """A fragment of the quarantine reason: what was found wrong past the outer checks."""
    cids: frozenset[str] = frozenset()
    """The values a pack carries (``bamlv_1_<hex>``): none may reach ``values_v1``."""


def put(store: ObjectStore, malformed: Sequence[Malformed]) -> None:
    """Store each object (the bucket notifies the projection queue)."""
    for m in malformed:
        store.put_if_absent(m.key, m.body, hashlib.sha256(m.body).hexdigest())


def ship_behind(ingest: Ingest, malformed: Sequence[Malformed]) -> None:
    """The malformed objects stored first, then the rig's workload store shipped by the real
    publisher: the healthy notifications queue behind the bad ones."""
    put(ingest.dataplane.store, malformed)
    report = Publisher(ingest.store_root, ingest.gateway_url, ingest.publisher_token).flush()
    assert report.complete, report.problems
    queue = ingest.dataplane.queue
    assert queue is not None and queue.approximate_count() > len(malformed)


def marker_key(key: str) -> str:
    prefix = evidence_prefix(SCOPE)
    return f"{prefix}quarantine/{key[len(prefix) :]}.quarantine"


def assert_quarantined(
    store: ObjectStore, dead: Sequence[Message], malformed: Sequence[Malformed]
) -> None:
    """Each object's notification in the dead-letter queue once (and nothing else there),
    its marker naming the key and the reason found past the outer checks, its bytes kept."""
    keys = sorted(
        record["s3"]["object"]["key"] for m in dead for record in json.loads(m.body)["Records"]
    )
    expected = sorted(m.key for m in malformed)
    assert keys == expected, f"dead-lettered {keys}, expected {expected}"
    for m in malformed:
        marker = json.loads(store.get(marker_key(m.key)))
        assert marker["key"] == m.key, m.name
        assert m.reason in marker["reason"], (m.name, marker["reason"])
        assert "InvalidChecksum" not in marker["reason"], (m.name, marker["reason"])
        assert store.get(m.key) == m.body, m.name  # the bytes are kept


# --- value packs --------------------------------------------------------------------------------

_PACK_HEAD = struct.Struct(">8sHI")


def _values(tag: str) -> list[bytes]:
    """Two whole codec-1 CAS files no workload holds, sorted by CID."""
    raws = [encode_cas_object(CODEC_VALUE, f"{tag}: value {i}".encode()) for i in range(2)]
    return sorted(raws, key=_cid)


def _cid(raw: bytes) -> bytes:
    return raw[20:52]  # BAMLVAL1 ‖ u16 version ‖ u16 codec ‖ u64 length ‖ cid[32]


def _rows(raws: Sequence[bytes], cids: Sequence[bytes] | None = None) -> list[dict[str, Any]]:
    """Manifest rows describing ``raws`` truthfully, but for the CIDs given in ``cids``."""
    rows, offset = [], 0
    for raw, cid in zip(raws, cids or [_cid(r) for r in raws], strict=True):
        rows.append(
            {"cid": cid.hex(), "codec": CODEC_VALUE, "length": len(raw), "offset": offset,
             "sha256": hashlib.sha256(raw).hexdigest()}
        )  # fmt: skip
        offset += len(raw)
    return rows


def _content(
    raws: Sequence[bytes],
    *,
    rows: list[dict[str, Any]] | None = None,
    manifest: bytes | None = None,
    magic: bytes = PACK_MAGIC,
    version: int = PACK_VERSION,
    manifest_len: int | None = None,
    tail: bytes = b"",
) -> bytes:
    """The decompressed pack of ``raws``, any part overridden."""
    if manifest is None:
        manifest = canonical_json({"entries": rows or _rows(raws), "version": PACK_VERSION})
    size = len(manifest) if manifest_len is None else manifest_len
    return b"".join([_PACK_HEAD.pack(magic, version, size), manifest, *raws, tail])


def _pack_cases() -> list[tuple[str, list[bytes], bytes, str]]:
    """(name, the CAS files it carries, decompressed content, reason fragment)."""
    cases = []
    raws = _values("sha256")
    flipped = bytearray(raws[1])
    flipped[40] ^= 0xFF  # inside the CAS header's CID: the manifest's sha256 no longer matches
    content = _content([raws[0], bytes(flipped)], rows=_rows(raws))
    cases.append(("entry bytes fail their sha256", raws, content, "do not match its sha256"))

    raws = _values("cid")
    other = encode_cas_object(CODEC_VALUE, b"cid: a value the manifest does not name")
    rows = _rows([raws[0], other], [_cid(raws[0]), _cid(raws[1])])  # right sha256, wrong CID
    content = _content([raws[0], other], rows=rows)
    cases.append(("an entry holds another CID", [*raws, other], content, "manifest disagrees"))

    raws = _values("canonical")
    spaced = json.dumps({"entries": _rows(raws), "version": PACK_VERSION}, sort_keys=True)
    content = _content(raws, manifest=spaced.encode("ascii"))
    cases.append(("manifest not canonical", raws, content, "not in canonical form"))

    raws = _values("order")
    content = _content(raws[::-1])
    cases.append(("entries out of CID order", raws, content, "sorted by cid"))

    raws = _values("tail")
    content = _content(raws, tail=b"\0" * 7)
    cases.append(("bytes after the last entry", raws, content, "7 bytes follow the last entry"))

    raws = _values("version")
    content = _content(raws, version=2)
    cases.append(("pack version 2", raws, content, "pack version 2"))

    raws = _values("magic")
    content = _content(raws, magic=b"BAMLPCK9")
    cases.append(("bad magic", raws, content, "pack magic"))

    raws = _values("truncated")
    content = _content(raws, manifest_len=1 << 20)
    cases.append(("manifest longer than the pack", raws, content, "manifest needs"))
    return cases


def malformed_packs(euid: str = "cd" * 16) -> list[Malformed]:
    """Packs in a valid zstd frame whose content ``decode_pack`` rejects."""
    out = []
    for n, (name, raws, content, reason) in enumerate(_pack_cases()):
        body = compress(content)
        assert decompress_frame(body) == content, name  # the frame itself is valid
        try:
            decode_pack(body)
        except PackError as exc:
            assert reason in str(exc), (name, exc)
        else:
            raise AssertionError(f"{name}: decode_pack accepted the pack")
        cids = frozenset(f"bamlv_1_{_cid(raw).hex()}" for raw in raws)
        out.append(Malformed(name, pack_key(SCOPE, euid, f"01J{n:023d}"), body, reason, cids))
    return out


# --- meta segments ------------------------------------------------------------------------------

_META_HEAD = struct.Struct(">HQ16sQQQ")


def meta_file(
    euid: bytes,
    sequence: int,
    records: Sequence[bytes],
    *,
    version: int = SCHEMA_VERSION,
    record_count: int | None = None,
) -> bytes:
    """A ``.bamlmeta`` file of encoded ``records`` (``u8 tag ‖ u32 len ‖ body`` each), its
    trailing SHA-256 computed over whatever it holds."""
    payload = b"".join(records)
    count = len(records) if record_count is None else record_count
    head = _META_HEAD.pack(version, sequence, euid, 0, count, len(payload))
    return with_checksum(META_MAGIC + head + payload)


def _euid(n: int) -> bytes:
    return bytes.fromhex(f"ee{n:030x}")


def _started(n: int) -> bytes:
    return encode_meta_record(RootStarted(ThreadRef(_euid(n), 1, 1), 1_000, b"\x01" * 16))


def _ended(n: int, status: int = 0) -> bytes:
    record = bytearray(
        encode_meta_record(
            RootEnded(
                ThreadRef(_euid(n), 1, 1), 2_000, RootStatus(0), 0, 1, 1, 1, ExecutionHealth()
            )
        )
    )
    record[5 + 40] = status  # after tag, length, thread ref (32) and ended_ns (8)
    return bytes(record)


_STREAM = encode_meta_record(StreamStarted(4242, 1_700_000_000_000_000_000, "0.1", "x86_64"))


def _meta_cases() -> list[tuple[str, int, bytes, str]]:
    """(name, key sequence, file, format error's class name), the n-th on stream ``_euid(n)``."""
    longer = _started(2)[5:] + b"\0"
    longer_record = bytes([TAG_ROOT_STARTED]) + len(longer).to_bytes(4, "big") + longer
    unknown_tag = bytes([9]) + (8).to_bytes(4, "big") + b"\0" * 8
    return [
        (
            "RootEnded status out of range",
            1,
            meta_file(_euid(0), 1, [_STREAM, _started(0), _ended(0, status=9)]),
            "MetaInvalidStatus",
        ),
        ("unknown record tag", 1, meta_file(_euid(1), 1, [_STREAM, unknown_tag]), "MetaUnknownTag"),
        (
            "a record body longer than its fields",
            1,
            meta_file(_euid(2), 1, [_STREAM, longer_record]),
            "TrailingBytes",
        ),
        (
            "StreamStarted after record 0",
            1,
            meta_file(_euid(3), 1, [_started(3), _STREAM]),
            "MetaStreamStartedMisplaced",
        ),
        (
            "more records than the payload holds",
            1,
            meta_file(_euid(4), 1, [_STREAM], record_count=1_000),
            "Truncated",
        ),
        (
            "an unsupported schema version",
            1,
            meta_file(_euid(5), 1, [_STREAM], version=SCHEMA_VERSION + 1),
            "UnsupportedVersion",
        ),
        (
            "another stream's euid in the header",
            1,
            meta_file(_euid(99), 1, [_STREAM, _ended(6)]),
            "EuidMismatch",
        ),
        (
            "another sequence in the header",
            2,
            meta_file(_euid(7), 3, [_started(7), _ended(7)]),
            "SequenceMismatch",
        ),
    ]


def malformed_metas() -> list[Malformed]:
    """Meta objects whose trailing checksum is correct and whose content fails to decode."""
    good = meta_file(_euid(0), 1, [_STREAM, _started(0), _ended(0)])
    assert len(decode_meta_file(good, _euid(0), 1).records) == 3  # the builder itself is right
    out = []
    for n, (name, key_seq, raw, error) in enumerate(_meta_cases()):
        try:
            decode_meta_file(raw, _euid(n), key_seq)
        except InvalidChecksum as exc:
            raise AssertionError(f"{name}: its checksum should pass") from exc
        except SegmentReadError as exc:
            assert type(exc).__name__ == error, (name, exc)
        else:
            raise AssertionError(f"{name}: decoded")
        key = segment_key(SCOPE, _euid(n).hex(), "meta", key_seq)
        out.append(Malformed(name, key, compress(raw), error))
    return out
