"""``PUT /projection-batches/{batch_id}``: the request checks that need no identity or store.

:func:`parse_batch` reads every header of the contract, decompresses the zstd body within its
limits, checks ``X-Baml-Content-Digest`` against the SHA-256 of the uncompressed Arrow IPC
stream, decodes it and checks that its schema is exactly the registered schema of the relation
(names, order, types, nullability): an unknown field, a missing field, a wrong type or a private
column such as ``call_site_file`` is refused with the difference in ``details`` and nothing is
written. Rows of a relation with ``execution_id`` must all belong to ``X-Baml-Root-Id``, so a
projection erasure by root id removes every fact a batch wrote.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from baml_studio.apierrors import BadRequest, PayloadTooLarge
from baml_studio.arrowipc import InvalidArrowStream, read_stream
from baml_studio.catalog.schema import RELATIONS
from baml_studio.control.schemas import PUBLIC_RELATION_NAMES, registered_schema
from baml_studio.control.schemas import batch_id as batch_id_of
from baml_studio.wirenumbers import ascii_whole_number

BATCH_ID = re.compile(r"^[A-Za-z0-9._:-]{1,256}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
PRIVATE_COLUMNS: dict[str, frozenset[str]] = {
    r.name: frozenset(c.name for c in r.private_columns()) for r in RELATIONS
}


class SchemaMismatch(BadRequest):
    code = "schema_mismatch"


class PrivateColumn(BadRequest):
    code = "private_column"


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_body_bytes: int = 64 * 1024 * 1024
    """Largest compressed body."""

    max_uncompressed_bytes: int = 512 * 1024 * 1024
    """Largest Arrow IPC stream after decompression."""


@dataclass(frozen=True, slots=True)
class BatchRequest:
    batch_id: str
    root_id: str
    project_id: str
    environment_id: str
    relation: str
    partition: int
    generation: str
    content_digest: str
    table: pa.Table


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name.lower())
    if value is None or value == "":
        raise BadRequest(
            f"the {name} header is required", code="missing_header", details={"header": name}
        )
    return value


def parse_headers(headers: Mapping[str, str], batch_id: str) -> BatchRequest:
    """Every header and the path, checked; ``table`` left empty (see :func:`parse_batch`)."""
    if not BATCH_ID.match(batch_id):
        raise BadRequest(
            "batch_id must be 1–256 characters of A–Z a–z 0–9 . _ : -",
            code="invalid_batch_id",
        )
    encoding = _header(headers, "Content-Encoding")
    if encoding.strip().lower() != "zstd":
        raise BadRequest(
            f"Content-Encoding must be zstd, not {encoding!r}", code="unsupported_encoding"
        )
    root_id = _header(headers, "X-Baml-Root-Id")
    if len(root_id) > 256:
        raise BadRequest("X-Baml-Root-Id is longer than 256 characters", code="invalid_root_id")
    relation = _header(headers, "X-Baml-Relation")
    if relation not in PUBLIC_RELATION_NAMES:
        raise BadRequest(
            f"X-Baml-Relation {relation!r} is not a registered public relation; "
            f"one of {sorted(PUBLIC_RELATION_NAMES)}",
            code="unknown_relation",
        )
    partition_text = _header(headers, "X-Baml-Partition")
    partition = ascii_whole_number(partition_text, max_digits=9)
    if partition is None:
        raise BadRequest(
            f"X-Baml-Partition must be an integer from 0 to 999999999 in ASCII digits, "
            f"not {partition_text!r}",
            code="invalid_partition",
        )
    derived = batch_id_of(root_id, relation, partition)
    if batch_id != derived:  # else one execution's rows could land twice under two ids
        raise BadRequest(
            f"batch_id {batch_id!r} is not the one X-Baml-Root-Id, X-Baml-Relation and "
            f"X-Baml-Partition derive: {derived[:300]!r}",
            code="batch_id_mismatch",
            details={"expected": derived[:300]},
        )
    digest = _header(headers, "X-Baml-Content-Digest")
    if not DIGEST.match(digest):
        raise BadRequest(
            "X-Baml-Content-Digest must be sha256: and 64 lowercase hex digits",
            code="invalid_digest",
        )
    return BatchRequest(
        batch_id=batch_id,
        root_id=root_id,
        project_id=_header(headers, "X-Baml-Project-Id"),
        environment_id=_header(headers, "X-Baml-Environment-Id"),
        relation=relation,
        partition=partition,
        generation=_header(headers, "X-Baml-Projection-Generation"),
        content_digest=digest,
        table=pa.table({}),
    )


_LOCAL = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor (one per thread: a decompressor is not shared between
    threads; making one per batch cost more than reading most batches)."""
    found: zstandard.ZstdDecompressor | None = getattr(_LOCAL, "zstd", None)
    if found is None:
        found = _LOCAL.zstd = zstandard.ZstdDecompressor()
    return found


def decompress(body: bytes, limits: BatchLimits) -> bytes:
    if len(body) > limits.max_body_bytes:
        raise PayloadTooLarge(
            f"the batch body has {len(body)} bytes; the limit is {limits.max_body_bytes}",
            code="batch_too_large",
        )
    try:
        declared = zstandard.frame_content_size(body)
        if declared > limits.max_uncompressed_bytes:
            raise PayloadTooLarge(
                f"the batch declares {declared} uncompressed bytes; the limit is "
                f"{limits.max_uncompressed_bytes}",
                code="batch_too_large",
            )
        if declared >= 0:
            # one exact allocation (a stream read of the limit allocates the limit: ~35 us a
            # batch); a frame that decodes to another size than it declares is a ZstdError
            raw = _decompressor().decompress(body)
        else:  # no size in the frame header: read at most one byte past the limit
            raw = _decompressor().stream_reader(body).read(limits.max_uncompressed_bytes + 1)
    except zstandard.ZstdError as exc:
        raise BadRequest(f"the body is not a zstd frame: {exc}", code="invalid_body") from exc
    if len(raw) > limits.max_uncompressed_bytes:
        raise PayloadTooLarge(
            f"the uncompressed batch exceeds {limits.max_uncompressed_bytes} bytes",
            code="batch_too_large",
        )
    return raw


def decode_arrow(raw: bytes) -> pa.Table:
    """The IPC stream's table, fully validated (:func:`baml_studio.arrowipc.read_stream`:
    Arrow's reader alone let a body with offsets past its data through, whose use crashed the
    process); anything else is refused as ``invalid_body``."""
    try:
        return read_stream(raw)
    except InvalidArrowStream as exc:
        raise BadRequest(
            f"the body is not an Arrow IPC stream: {exc}", code="invalid_body"
        ) from exc


@cache
def schema_message(relation: str) -> bytes:
    """The registered schema of ``relation`` as the first message of an IPC stream, byte for
    byte what ``pa.ipc.new_stream`` writes for it (the projector's encoder sends exactly this)."""
    message: bytes = registered_schema(relation).serialize().to_pybytes()
    return message


def decode_registered(relation: str, raw: bytes) -> pa.Table | None:
    """The stream's record batches read against the registered schema, when the stream's
    schema message is the registered one byte for byte; ``None`` when it is not, or when
    anything after it is not a readable record batch: :func:`decode_arrow` and
    :func:`check_schema` then decide, and refuse as they always have.

    Equal bytes are an equal schema, field metadata included, so this skips the general
    reader's schema decode and ``Schema.equals`` (which builds both schemas' fingerprints:
    ~20 of the ~50 µs a small batch's decode and check cost). Property-tested equal to the
    general path (``tests/control/test_ingest_body.py``)."""
    prefix = schema_message(relation)
    if not raw.startswith(prefix):
        return None
    schema = registered_schema(relation)
    batches: list[pa.RecordBatch] = []
    try:
        body = pa.BufferReader(pa.py_buffer(raw).slice(len(prefix)))
        reader = pa.ipc.MessageReader.open_stream(body)
        while True:
            try:
                message = reader.read_next_message()
            except StopIteration:  # the end-of-stream marker, or the end of the bytes
                break
            if message.type != "record batch":
                return None
            batch = pa.ipc.read_record_batch(message, schema)
            batch.validate(full=True)  # as :func:`decode_arrow` does
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError):
        return None
    return pa.Table.from_batches(batches, schema)


def check_schema(relation: str, schema: pa.Schema) -> bool:
    """Refuse any difference from the registered schema, private columns first. True if the
    schema is the registered one exactly, field metadata included (the common case, checked
    first: the registered schema has no private column); False if only metadata differs."""
    expected = registered_schema(relation)
    if schema.equals(expected, check_metadata=True):
        return True
    names = schema.names
    private = sorted(PRIVATE_COLUMNS[relation].intersection(names))
    if private:
        raise PrivateColumn(
            f"{relation} batch carries private columns {private}; values, source locations "
            "and thread names stay in the data plane",
            details={"relation": relation, "private_columns": private},
        )
    if schema.equals(expected, check_metadata=False):
        return False
    unknown = [n for n in names if n not in expected.names]
    missing = [n for n in expected.names if n not in names]
    different = [
        {
            "name": f.name,
            "expected": str(expected.field(f.name).type),
            "got": str(f.type),
            "expected_nullable": expected.field(f.name).nullable,
            "got_nullable": f.nullable,
        }
        for f in schema
        if f.name in expected.names and not f.equals(expected.field(f.name), check_metadata=False)
    ]
    order_differs = not unknown and not missing and not different
    raise SchemaMismatch(
        f"{relation} batch schema differs from the registered schema "
        f"(GET /projection-schemas/{{catalog_version}})",
        details={
            "relation": relation,
            "unknown_fields": unknown,
            "missing_fields": missing,
            "type_differences": different,
            "order_differs": order_differs,
        },
    )


@cache
def _row_rules(relation: str) -> tuple[tuple[tuple[int, str], ...], int | None]:
    """Positions and names of the registered schema's non-nullable columns, and the position
    of ``execution_id`` (None if the relation has none)."""
    expected = registered_schema(relation)
    required = tuple((i, f.name) for i, f in enumerate(expected) if not f.nullable)
    names = expected.names
    return required, names.index("execution_id") if "execution_id" in names else None


SMALL_ROOT_CHECK = 512
"""Rows up to which ``execution_id`` is compared in Python (a compute call costs more)."""


def check_rows(request: BatchRequest, table: pa.Table, *, exact: bool = False) -> pa.Table:
    """Non-null columns hold no nulls; every ``execution_id`` is the batch's root id. The
    table has the registered schema's columns in its order (:func:`check_schema`); unless
    ``exact`` (its schema is the registered one, metadata included) it is cast to it."""
    required, execution_id = _row_rules(request.relation)
    for position, name in required:  # one column object each: ``table.columns`` makes all
        if table.column(position).null_count:
            raise SchemaMismatch(
                f"column {name} is not nullable but holds nulls",
                details={"relation": request.relation, "column": name},
            )
    if execution_id is not None and table.num_rows:
        ids = table.column(execution_id)
        if table.num_rows <= SMALL_ROOT_CHECK:
            others = table.num_rows - ids.to_pylist().count(request.root_id)
        else:
            others = pc.sum(pc.not_equal(ids, request.root_id)).as_py()
        if others:
            raise BadRequest(
                f"{others} rows have an execution_id other than X-Baml-Root-Id",
                code="root_mismatch",
                details={"root_id": request.root_id},
            )
    return table if exact else table.cast(registered_schema(request.relation))


def parse_batch(
    headers: Mapping[str, str], batch_id: str, body: bytes, limits: BatchLimits
) -> BatchRequest:
    """The whole request checked and decoded (no identity, scope or generation checks)."""
    request = parse_headers(headers, batch_id)
    raw = decompress(body, limits)
    actual = "sha256:" + hashlib.sha256(raw).hexdigest()
    if actual != request.content_digest:
        raise BadRequest(
            "X-Baml-Content-Digest does not match the SHA-256 of the uncompressed body",
            code="digest_mismatch",
            details={"declared": request.content_digest, "actual": actual},
        )
    table = decode_registered(request.relation, raw)
    if table is None:
        table = decode_arrow(raw)
        exact = check_schema(request.relation, table.schema)
    else:
        exact = True
    table = check_rows(request, table, exact=exact)
    return replace(request, table=table)
