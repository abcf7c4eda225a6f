"""What one flush plans: the objects to ship (``Outgoing``), per-stream batches, the problems.

``collect`` fills a :class:`FlushPlan` (segments first, then the CAS files of
``collect_cas``); ``flush`` ships it.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.format.cas import CODEC_FUNCTION_TABLE, CODEC_VALUE
from baml_studio.format.ids import value_cid_wire
from baml_studio.publisher.config import PublisherConfig
from baml_studio.publisher.pack import compress
from baml_studio.publisher.state import Cursor
from baml_studio.store.layout import Plane


class Kind(enum.Enum):
    """The ``kind`` of an authorize entry."""

    META = "meta_segment"
    DATA = "data_segment"
    PACK = "value_pack"
    VALUE = "value"
    TABLE = "table"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One compressed object ready to authorize and PUT."""

    kind: Kind
    body: bytes
    sha256: str
    original_bytes: int
    sequence: int | None = None
    cid: bytes | None = None
    flush_id: str | None = None
    members: tuple[bytes, ...] = ()
    """Packs: the CIDs inside."""
    source: Path | None = None
    """The local file (segments, values and tables); packs: None."""

    def request_entry(self) -> dict[str, Any]:
        """This object as an ``UploadObject`` of openapi.yaml."""
        entry: dict[str, Any] = {
            "kind": self.kind.value, "size_bytes": len(self.body), "checksum_sha256": self.sha256,
        }  # fmt: skip
        if self.kind in (Kind.META, Kind.DATA):
            entry["sequence"] = self.sequence
        elif self.kind is Kind.PACK:
            entry["entry_count"] = len(self.members)
        elif self.cid is not None:
            entry["cid"] = value_cid_wire(self.cid)
            entry["codec"] = CODEC_VALUE if self.kind is Kind.VALUE else CODEC_FUNCTION_TABLE
        return entry


class ProblemCode(enum.Enum):
    """Why a file was not shipped."""

    MISSING = "missing"
    """A segment sequence below an existing one is absent."""
    WAITS_FOR_DATA = "waits_for_data"
    """A meta segment whose executions may need data segments that cannot ship yet."""
    UNREADABLE = "unreadable"
    CORRUPT = "corrupt"
    """Bad magic, length, name or checksum."""
    UNSUPPORTED = "unsupported"
    """A segment or CAS version (or CAS codec) the gateway does not accept."""
    OVERSIZE = "oversize"
    """Compressed larger than the config's ``max_object_bytes``."""
    REJECTED = "rejected"
    """The gateway refused the object with a terminal status (413 on authorize or PUT)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """A file (or pack) that was not shipped, and why."""

    path: Path
    reason: str
    skipped: bool
    """True: the cursor passes it or it does not hold a cursor (a value, table or pack), and
    the rest ships; False: it blocks its plane for now."""
    code: ProblemCode = ProblemCode.CORRUPT
    size_bytes: int | None = None
    """Compressed size, for ``OVERSIZE`` and ``REJECTED``."""
    error: Exception | None = None
    """``REJECTED``: the gateway's typed error (``GatewayRejected`` or ``UploadFailed``, 413)."""


@dataclass(slots=True)
class StreamBatch:
    euid: bytes
    cursor: Cursor
    meta: list[Outgoing] = field(default_factory=list)
    data: list[Outgoing] = field(default_factory=list)
    skipped: dict[Plane, set[int]] = field(
        default_factory=lambda: {Plane.META: set(), Plane.DATA: set()}
    )


@dataclass(slots=True)
class FlushPlan:
    flush_id: str
    carrier: bytes | None
    """The stream whose ``process_euid`` carries the CAS objects and packs."""
    cas: list[Outgoing] = field(default_factory=list)
    packs: list[Outgoing] = field(default_factory=list)
    streams: list[StreamBatch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def objects(self) -> int:
        return (
            len(self.cas) + len(self.packs) + sum(len(s.meta) + len(s.data) for s in self.streams)
        )

    @property
    def original_bytes(self) -> int:
        every = [*self.cas, *self.packs, *(o for s in self.streams for o in (*s.meta, *s.data))]
        return sum(o.original_bytes for o in every)


def make_object(kind: Kind, raw: bytes, level: int, **extra: Any) -> Outgoing:
    """``raw`` compressed at ``level`` and checksummed."""
    body = compress(raw, level)
    return Outgoing(kind, body, hashlib.sha256(body).hexdigest(), len(raw), **extra)


def oversize(obj: Outgoing, config: PublisherConfig, consequence: str) -> Problem:
    where = obj.source or Path(f"<{obj.kind.value} {obj.flush_id}>")
    reason = (
        f"{obj.kind.value} compresses to {len(obj.body)} bytes, over the gateway's "
        f"max_object_bytes {config.max_object_bytes}{consequence}"
    )
    skipped = obj.kind not in (Kind.META, Kind.DATA)
    return Problem(where, reason, skipped, ProblemCode.OVERSIZE, len(obj.body))
