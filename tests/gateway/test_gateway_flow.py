"""The authorize flow against both adapter families: authorize → PUT → authorize says stored;
a changed checksum under an existing key says conflict; logs never carry presigned URLs."""

from __future__ import annotations

import base64
import logging

import pytest
from gateway_rig import (
    CID_TABLE,
    CID_VALUE,
    EUID,
    FLUSH_ID,
    GatewayRig,
    body_of,
    entry,
    five_kinds,
    http_put,
    request_body,
    sha,
)

from baml_studio.gateway.models import AuthorizeUploadResponse, PublisherConfig

PREFIX = "evidence/v1/tn_acme/prj_billing/env_prod/"
EXPECTED_KEYS = [
    f"{PREFIX}cas/tables/cd/{CID_TABLE[8:]}.bamltable.zst",
    f"{PREFIX}cas/values/ab/{CID_VALUE[8:]}.bamlvalue.zst",
    f"{PREFIX}streams/{EUID}/values/{FLUSH_ID}.bamlpack.zst",
    f"{PREFIX}streams/{EUID}/data/00000000000000000001.bamldata.zst",
    f"{PREFIX}streams/{EUID}/meta/00000000000000000001.bamlmeta.zst",
]


def test_gateway_authorize_put_then_stored(rig: GatewayRig) -> None:
    flush = five_kinds()
    response = rig.authorize(request_body([e for e, _ in flush]))
    assert response.status_code == 200, response.text
    answer = AuthorizeUploadResponse.model_validate(response.json())
    assert answer.flush_id == FLUSH_ID
    assert [o.key for o in answer.objects] == EXPECTED_KEYS
    assert [o.kind for o in answer.objects] == [e["kind"] for e, _ in flush]
    assert answer.objects[0].cid == CID_TABLE and answer.objects[0].sequence is None
    assert answer.objects[3].sequence == 1 and answer.objects[3].cid is None
    for obj, (_requested, data) in zip(answer.objects, flush, strict=True):
        assert obj.state == "upload_required"
        assert obj.upload_url is not None and obj.expires_at is not None
        assert obj.required_headers == {
            "If-None-Match": "*",
            "x-amz-checksum-sha256": base64.b64encode(bytes.fromhex(sha(data))).decode(),
            "Content-Length": str(len(data)),
        }
        put = http_put(str(obj.upload_url), data, obj.required_headers)
        assert put.status == 200, put.body
        assert rig.store.get(obj.key) == data
    again = rig.authorize(request_body([e for e, _ in flush]))
    assert again.status_code == 200
    objects = again.json()["objects"]
    assert [o["state"] for o in objects] == ["stored"] * 5
    assert all(set(o) <= {"kind", "key", "state", "sequence", "cid"} for o in objects)


def test_gateway_conflict_for_changed_checksum(rig: GatewayRig) -> None:
    data = body_of("meta")
    first = rig.authorize(request_body([entry("meta_segment", data, sequence=7)]))
    obj = first.json()["objects"][0]
    assert http_put(obj["upload_url"], data, obj["required_headers"]).status == 200
    changed = body_of("other meta")
    for size_data in (changed, changed[:100]):
        response = rig.authorize(request_body([entry("meta_segment", size_data, sequence=7)]))
        assert response.status_code == 200
        [answer] = response.json()["objects"]
        assert answer["state"] == "conflict"
        assert "upload_url" not in answer and "required_headers" not in answer
    assert rig.store.get(obj["key"]) == data


def test_gateway_presigned_url_refuses_second_put(rig: GatewayRig) -> None:
    data = body_of("data")
    obj = rig.authorize(request_body([entry("data_segment", data, sequence=3)])).json()["objects"][
        0
    ]
    assert http_put(obj["upload_url"], data, obj["required_headers"]).status == 200
    assert http_put(obj["upload_url"], data, obj["required_headers"]).status == 412


def test_gateway_one_head_per_key(rig: GatewayRig, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_head = rig.store.head

    def counting_head(key: str):  # type: ignore[no-untyped-def]
        calls.append(key)
        return real_head(key)

    monkeypatch.setattr(rig.store, "head", counting_head)
    data = body_of("shared value")
    value = entry("value", data, cid=CID_VALUE, codec=1)
    response = rig.authorize(request_body([value, entry("meta_segment", data, sequence=1), value]))
    assert response.status_code == 200
    assert sorted(calls) == sorted(set(calls)) and len(calls) == 2
    states = [o["state"] for o in response.json()["objects"]]
    assert states == ["upload_required"] * 3


def test_gateway_publisher_config(rig: GatewayRig) -> None:
    response = rig.http.get("/v1/publisher/config", headers=rig.headers())
    assert response.status_code == 200
    assert response.headers["cache-control"] == "max-age=300"
    PublisherConfig.model_validate(response.json())
    assert response.json() == {
        "capture_enabled": True,
        "supported_segment_versions": [2],
        "supported_cas_versions": [1],
        "flush_interval_seconds": 5,
        "max_objects_per_authorize": 100,
        "large_value_threshold_bytes": 32768,
        "max_object_bytes": 268435456,
        "pack_max_entry_bytes": 8388608,
        "shipped_value_retention_seconds": 3600,
        "upload_url_ttl_seconds": 900,
    }


def test_gateway_logs_ids_and_states_never_urls(
    rig: GatewayRig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    flush = five_kinds()
    response = rig.authorize(
        request_body([e for e, _ in flush]), **{"X-Baml-Request-Id": "req-log-1"}
    )
    urls = [o["upload_url"] for o in response.json()["objects"]]
    ours = [r for r in caplog.records if r.name.startswith("baml_studio")]
    assert ours, "the gateway logged nothing"
    text = "\n".join(record.getMessage() for record in ours)
    assert "req-log-1" in text and FLUSH_ID in text and "upload_required=5" in text
    for url in urls:
        assert url not in text
        assert url.partition("?")[2] not in text
    assert "Signature" not in text and "X-Amz-Credential" not in text
