"""Object keys: golden keys from the openapi example, and every field rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import InvalidKeyField
from baml_studio.gateway.keys import (
    MAX_SEQUENCE,
    cas_key,
    evidence_prefix,
    object_key,
    pack_key,
    segment_key,
)
from baml_studio.gateway.models import SegmentUploadObject

SCOPE = Scope("tn_acme", "prj_billing", "env_prod")
EUID = "3f9c2b7e1a4d4c8e9b0f1e2d3c4b5a69"
ROOT = "evidence/v1/tn_acme/prj_billing/env_prod/"


def test_gateway_keys_match_openapi_example() -> None:
    assert evidence_prefix(SCOPE) == ROOT
    assert segment_key(SCOPE, EUID, "meta", 41) == (
        f"{ROOT}streams/{EUID}/meta/00000000000000000041.bamlmeta.zst"
    )
    assert segment_key(SCOPE, EUID, "data", 120) == (
        f"{ROOT}streams/{EUID}/data/00000000000000000120.bamldata.zst"
    )
    assert pack_key(SCOPE, EUID, "01J8ZK3V5N4Q2W8X7Y6T5R4E3D") == (
        f"{ROOT}streams/{EUID}/values/01J8ZK3V5N4Q2W8X7Y6T5R4E3D.bamlpack.zst"
    )
    cid = "ab5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    assert cas_key(SCOPE, "values", "bamlv_1_" + cid) == f"{ROOT}cas/values/ab/{cid}.bamlvalue.zst"
    assert cas_key(SCOPE, "tables", cid) == f"{ROOT}cas/tables/ab/{cid}.bamltable.zst"


def test_gateway_sequence_bounds() -> None:
    assert segment_key(SCOPE, EUID, "meta", MAX_SEQUENCE).endswith(
        "/18446744073709551615.bamlmeta.zst"
    )
    for bad in (0, -1, MAX_SEQUENCE + 1):
        with pytest.raises(InvalidKeyField, match="sequence"):
            segment_key(SCOPE, EUID, "meta", bad)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: segment_key(SCOPE, "3F" * 16, "meta", 1), "process_euid"),
        (lambda: segment_key(SCOPE, EUID[:-1], "data", 1), "process_euid"),
        (lambda: pack_key(SCOPE, EUID, "01J8ZK3V5N4Q2W8X7Y6T5R4E3U"), "flush_id"),
        (lambda: pack_key(SCOPE, EUID, "81J8ZK3V5N4Q2W8X7Y6T5R4E3D"), "flush_id"),
        (lambda: cas_key(SCOPE, "values", "bamlv_1_" + "g" * 64), "cid"),
        (lambda: cas_key(SCOPE, "values", "bamlv_2_" + "a" * 64), "cid"),
    ],
)
def test_gateway_bad_key_fields(call: object, field: str) -> None:
    with pytest.raises(InvalidKeyField) as info:
        call()  # type: ignore[operator]
    assert info.value.details["field"] == field and info.value.status == 400


def test_gateway_scope_parts_are_validated() -> None:
    for bad in ("", "..", "a/b", ".hidden", "x" * 129):
        with pytest.raises(ValueError):
            Scope(bad, "p", "e")


@given(st.integers(min_value=1, max_value=MAX_SEQUENCE))
def test_gateway_segment_key_round_trips_sequence(sequence: int) -> None:
    entry = SegmentUploadObject(
        kind="data_segment", sequence=sequence, size_bytes=1, checksum_sha256="0" * 64
    )
    key = object_key(SCOPE, EUID, "01J8ZK3V5N4Q2W8X7Y6T5R4E3D", entry)
    digits = key.rsplit("/", 1)[1].removesuffix(".bamldata.zst")
    assert len(digits) == 20 and int(digits) == sequence
