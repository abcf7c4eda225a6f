"""Object keys, a pure function of the authenticated scope and one authorize entry.

Layout under ``evidence/v1/<tenant>/<project>/<environment>/`` (system contract, "Object kinds")::

    streams/<euid>/meta/<seq>.bamlmeta.zst          meta_segment
    streams/<euid>/data/<seq>.bamldata.zst          data_segment
    streams/<euid>/values/<flush_ulid>.bamlpack.zst value_pack
    cas/values/<2 hex>/<cid hex>.bamlvalue.zst      value  (codec 1)
    cas/tables/<2 hex>/<cid hex>.bamltable.zst      table  (codec 2)

``<euid>`` is 32 lowercase hex, ``<seq>`` 20 decimal digits (1 to 2**64-1), ``<cid hex>`` the 64
lowercase hex digits of the CID without its ``bamlv_1_`` prefix, ``<2 hex>`` its first two.
Every function raises :class:`~baml_studio.gateway.errors.InvalidKeyField` (400) for a field
outside these rules, naming the field and the rule.
"""

from __future__ import annotations

import re
from typing import Literal

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import InvalidKeyField
from baml_studio.gateway.models import (
    SegmentUploadObject,
    TableUploadObject,
    ValuePackUploadObject,
    ValueUploadObject,
)

EVIDENCE_ROOT = "evidence/v1"
MAX_SEQUENCE = (1 << 64) - 1
CID_PREFIX = "bamlv_1_"
SEGMENT_SUFFIX = {"meta": ".bamlmeta.zst", "data": ".bamldata.zst"}
CAS_SUFFIX = {"values": ".bamlvalue.zst", "tables": ".bamltable.zst"}

_EUID = re.compile(r"[0-9a-f]{32}")
_CID_HEX = re.compile(r"[0-9a-f]{64}")
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")

Plane = Literal["meta", "data"]
CasFamily = Literal["values", "tables"]
UploadEntry = SegmentUploadObject | ValuePackUploadObject | ValueUploadObject | TableUploadObject


def evidence_prefix(scope: Scope) -> str:
    """``evidence/v1/<tenant>/<project>/<environment>/`` (with the trailing slash)."""
    return f"{EVIDENCE_ROOT}/{scope.tenant}/{scope.project}/{scope.environment}/"


def check_euid(euid: str) -> str:
    if not isinstance(euid, str) or not _EUID.fullmatch(euid):
        raise InvalidKeyField(
            f"process_euid {euid!r} must be 32 lowercase hex digits",
            details={"field": "process_euid"},
        )
    return euid


def check_sequence(sequence: int) -> int:
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise InvalidKeyField(
            f"sequence {sequence!r} must be an integer", details={"field": "sequence"}
        )
    if not 1 <= sequence <= MAX_SEQUENCE:
        raise InvalidKeyField(
            f"sequence {sequence} is out of range: sequences start at 1 and fit in 64 bits "
            f"(1..{MAX_SEQUENCE})",
            details={"field": "sequence", "value": sequence},
        )
    return sequence


def check_flush_ulid(flush_id: str) -> str:
    if not isinstance(flush_id, str) or not _ULID.fullmatch(flush_id):
        raise InvalidKeyField(
            f"flush_id {flush_id!r} must be a ULID: 26 Crockford base32 characters "
            "(upper case, no I L O U), the first 0-7",
            details={"field": "flush_id"},
        )
    return flush_id


def cid_hex(cid: str) -> str:
    """The 64 hex digits of a CID given as ``bamlv_1_<hex>`` or as bare hex."""
    digits = cid[len(CID_PREFIX) :] if isinstance(cid, str) and cid.startswith(CID_PREFIX) else cid
    if not isinstance(digits, str) or not _CID_HEX.fullmatch(digits):
        raise InvalidKeyField(
            f"cid {cid!r} must be 'bamlv_1_' followed by 64 lowercase hex digits",
            details={"field": "cid"},
        )
    return digits


def segment_key(scope: Scope, euid: str, plane: Plane, sequence: int) -> str:
    """Key of meta or data segment ``sequence`` of stream ``euid``."""
    if plane not in SEGMENT_SUFFIX:
        raise InvalidKeyField(f"plane {plane!r} must be 'meta' or 'data'")
    return (
        f"{evidence_prefix(scope)}streams/{check_euid(euid)}/{plane}/"
        f"{check_sequence(sequence):020d}{SEGMENT_SUFFIX[plane]}"
    )


def pack_key(scope: Scope, euid: str, flush_id: str) -> str:
    """Key of the value pack of flush ``flush_id`` of stream ``euid``."""
    return (
        f"{evidence_prefix(scope)}streams/{check_euid(euid)}/values/"
        f"{check_flush_ulid(flush_id)}.bamlpack.zst"
    )


def cas_key(scope: Scope, family: CasFamily, cid: str) -> str:
    """Key of a large value (``values``) or function table (``tables``) by CID."""
    if family not in CAS_SUFFIX:
        raise InvalidKeyField(f"CAS family {family!r} must be 'values' or 'tables'")
    digits = cid_hex(cid)
    return f"{evidence_prefix(scope)}cas/{family}/{digits[:2]}/{digits}{CAS_SUFFIX[family]}"


def object_key(scope: Scope, euid: str, flush_id: str, entry: UploadEntry) -> str:
    """Key of one authorize entry of flush ``flush_id`` of stream ``euid``."""
    if isinstance(entry, SegmentUploadObject):
        plane: Plane = "meta" if entry.kind == "meta_segment" else "data"
        return segment_key(scope, euid, plane, entry.sequence)
    if isinstance(entry, ValuePackUploadObject):
        return pack_key(scope, euid, flush_id)
    if isinstance(entry, ValueUploadObject):
        return cas_key(scope, "values", entry.cid)
    return cas_key(scope, "tables", entry.cid)
