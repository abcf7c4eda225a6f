"""``EvidenceReader``: one scope's evidence objects read by key, verified and decoded.

Every object is one zstd frame of a store file exactly as the profiler wrote it (publisher
``collect.py``). A read computes the key from the scope (:mod:`baml_studio.gateway.keys`), gets
the object, decompresses its single frame (both the object and the frame's declared content
at most ``max_object_bytes``), then verifies and decodes it as the local store reader does
(:mod:`baml_studio.store.segments`): the trailing SHA-256 first, then the format version, the
stream euid and sequence of a segment, or the CID and codec of a CAS object.

Failures are typed (:mod:`.errors`), each naming the key: ``EvidenceMissing`` (no object),
``EvidenceCorrupt`` (anything about the bytes; the format error is the ``__cause__``),
``EvidenceOutOfScope`` (a key outside the scope's evidence prefix, or a stream id or CID that
cannot form a key), ``EvidenceUnavailable`` (the bucket failed; transient).

Decoded meta segments and function tables are kept in a small LRU per reader: every
``RootEnded`` of a stream reads meta sequence 1 and its engine's table.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import TypeVar

from baml_studio.format.cas import CODEC_FUNCTION_TABLE, CODEC_VALUE, CasObject
from baml_studio.format.errors import SegmentReadError
from baml_studio.format.function_table import FunctionTable, decode_function_table
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import DataSegment, MetaSegment
from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import InvalidKeyField
from baml_studio.gateway.keys import CasFamily, Plane, cas_key, evidence_prefix, segment_key
from baml_studio.objectstore.errors import ObjectNotFound, ObjectStoreError
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.errors import (
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceOutOfScope,
    EvidenceUnavailable,
)
from baml_studio.publisher.errors import PackFrameInvalid
from baml_studio.publisher.pack import decompress_frame
from baml_studio.store.segments import decode_cas_file, decode_data_file, decode_meta_file

MIB = 1 << 20
DEFAULT_MAX_OBJECT_BYTES = 256 * MIB
"""The contract's ``max_object_bytes``: no evidence object (nor its content) is larger."""
META_CACHE_SIZE = 64
TABLE_CACHE_SIZE = 16

K = TypeVar("K")
V = TypeVar("V")


class _Lru(OrderedDict[K, V]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key: K, value: V) -> V:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value

    def recall(self, key: K) -> V | None:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value


class EvidenceReader:
    """Reads the evidence of ``scope`` from ``store``. Not thread-safe (one per message)."""

    def __init__(
        self,
        store: ObjectStore,
        scope: Scope,
        *,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
    ) -> None:
        if max_object_bytes < 1:
            raise ValueError(f"max_object_bytes must be at least 1, got {max_object_bytes}")
        self.store = store
        self.scope = scope
        self.prefix = evidence_prefix(scope)
        self.max_object_bytes = max_object_bytes
        self._metas: _Lru[tuple[str, int], MetaSegment] = _Lru(META_CACHE_SIZE)
        self._tables: _Lru[bytes, FunctionTable] = _Lru(TABLE_CACHE_SIZE)

    # --- keys ------------------------------------------------------------------------------

    def segment_key(self, euid_hex: str, plane: Plane, sequence: int) -> str:
        try:
            return segment_key(self.scope, euid_hex, plane, sequence)
        except InvalidKeyField as exc:
            raise EvidenceOutOfScope(f"no {plane} segment key in {self.prefix}: {exc}") from exc

    def cas_key(self, family: CasFamily, cid: bytes) -> str:
        try:
            return cas_key(self.scope, family, cid.hex())
        except InvalidKeyField as exc:
            raise EvidenceOutOfScope(f"no {family} key in {self.prefix}: {exc}") from exc

    # --- reads -----------------------------------------------------------------------------

    def meta(self, euid_hex: str, seq: int) -> MetaSegment:
        """Meta segment ``seq`` of stream ``euid_hex`` (checksum, version, euid, sequence)."""
        cached = self._metas.recall((euid_hex, seq))
        if cached is not None:
            return cached
        key = self.segment_key(euid_hex, "meta", seq)
        euid = bytes.fromhex(euid_hex)
        segment = self._decode(key, lambda raw: decode_meta_file(raw, euid, seq))
        return self._metas.remember((euid_hex, seq), segment)

    def data(
        self, euid_hex: str, seq: int, roots: Collection[ThreadRef] | None = None
    ) -> DataSegment:
        """Data segment ``seq`` of stream ``euid_hex``; with ``roots`` only their groups are
        decoded (the others' framing is still checked)."""
        key = self.segment_key(euid_hex, "data", seq)
        euid = bytes.fromhex(euid_hex)
        return self._decode(key, lambda raw: decode_data_file(raw, euid, seq, roots))

    def function_table(self, cid: bytes) -> FunctionTable:
        """The codec-2 CAS object ``cid`` under ``cas/tables/``, decoded."""
        cached = self._tables.recall(cid)
        if cached is not None:
            return cached
        key = self.cas_key("tables", cid)

        def decode(raw: bytes) -> FunctionTable:
            obj = decode_cas_file(raw, cid)
            if obj.codec != CODEC_FUNCTION_TABLE:
                raise _WrongCodec(obj.codec, CODEC_FUNCTION_TABLE)
            return decode_function_table(obj.body)

        return self._tables.remember(cid, self._decode(key, decode))

    def cas_value(self, cid: bytes) -> CasObject:
        """The codec-1 CAS object ``cid`` under ``cas/values/`` (a large value), verified to
        hash to its CID."""
        key = self.cas_key("values", cid)

        def decode(raw: bytes) -> CasObject:
            obj = decode_cas_file(raw, cid)
            if obj.codec != CODEC_VALUE:
                raise _WrongCodec(obj.codec, CODEC_VALUE)
            return obj

        return self._decode(key, decode)

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key`` (which must lie under the scope's prefix)."""
        self._check_scope(key)
        try:
            self.store.head(key)
        except ObjectNotFound:
            return False
        except ObjectStoreError as exc:
            raise EvidenceUnavailable(f"cannot check {key}: {exc}", key=key) from exc
        return True

    # --- internals -------------------------------------------------------------------------

    def _check_scope(self, key: str) -> None:
        if not isinstance(key, str) or not key.startswith(self.prefix):
            raise EvidenceOutOfScope(
                f"key {key!r} is outside this scope's evidence prefix {self.prefix!r}",
                key=str(key),
            )

    def _get(self, key: str) -> bytes:
        self._check_scope(key)
        try:
            body = self.store.get(key)
        except ObjectNotFound as exc:
            raise EvidenceMissing(f"no evidence object {key}", key=key) from exc
        except ObjectStoreError as exc:
            raise EvidenceUnavailable(f"cannot read {key}: {exc}", key=key) from exc
        if len(body) > self.max_object_bytes:
            raise EvidenceCorrupt(
                f"{key} is {len(body)} bytes; the limit is {self.max_object_bytes}", key=key
            )
        try:
            return decompress_frame(body, self.max_object_bytes)
        except PackFrameInvalid as exc:
            raise EvidenceCorrupt(f"{key} is not one valid zstd frame: {exc}", key=key) from exc

    def _decode(self, key: str, decode: Callable[[bytes], V]) -> V:
        raw = self._get(key)
        try:
            return decode(raw)
        except SegmentReadError as exc:
            raise EvidenceCorrupt(
                f"{key} fails verification: {type(exc).__name__}: {exc}", key=key
            ) from exc


class _WrongCodec(SegmentReadError):
    """A CAS object under the other family's prefix (internal; becomes EvidenceCorrupt)."""

    def __init__(self, codec: int, expected: int) -> None:
        super().__init__(f"CAS object has codec {codec}; this family holds codec {expected}")
