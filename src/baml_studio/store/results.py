"""Outcomes of publication. Writers return these; they never raise for I/O failure."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from baml_studio.store.errors import StoreFailureReason


class AdmissionGate(enum.IntEnum):
    """The writer's latched admission state, readable by the profiler (``store.gate``)."""

    OPEN = 0
    DISK = 1
    UNAVAILABLE = 2


GATE_OPEN = AdmissionGate.OPEN
GATE_DISK = AdmissionGate.DISK
GATE_UNAVAILABLE = AdmissionGate.UNAVAILABLE


class PublicationKind(enum.Enum):
    META = "meta"
    DATA = "data"
    CAS = "cas"


@dataclass(frozen=True, slots=True)
class StreamHighWater:
    """The highest committed (or indeterminate) sequence per plane; 0 means none."""

    meta: int = 0
    data: int = 0


@dataclass(frozen=True, slots=True)
class IndeterminateToken:
    """A renamed file whose durability or accounting is unknown. It blocks every publication
    of its writer (both planes and CAS) until ``resolve_indeterminate()`` succeeds."""

    ordinal: int
    kind: PublicationKind
    path: Path


@dataclass(frozen=True, slots=True)
class Committed:
    """The segment is durable at its final path and counted in the ledger."""

    sequence: int


@dataclass(frozen=True, slots=True)
class Lost:
    """Nothing was published; for segments the sequence number was not consumed."""

    reason: StoreFailureReason


@dataclass(frozen=True, slots=True)
class Blocked:
    """Refused without touching disk because an earlier publication is indeterminate."""

    token: IndeterminateToken


@dataclass(frozen=True, slots=True)
class Indeterminate:
    """Renamed into place, but the directory fsync or ledger update failed.

    A segment's ``sequence`` is owned by this file (the high water includes it); ``None`` for CAS.
    """

    token: IndeterminateToken
    sequence: int | None


@dataclass(frozen=True, slots=True)
class Published:
    """A new CAS object is durable and counted."""

    cid: bytes


@dataclass(frozen=True, slots=True)
class Reused:
    """A byte-identical CAS object already existed and was re-verified."""

    cid: bytes


@dataclass(frozen=True, slots=True)
class Conflict:
    """Something else sits at the CID's path; it was left untouched."""

    cid: bytes


PublishResult = Committed | Lost | Blocked | Indeterminate
CasResult = Published | Reused | Lost | Conflict | Blocked | Indeterminate
