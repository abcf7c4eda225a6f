"""Presigned create-only PUTs over real HTTP, against both adapters: the directory bucket's own
ASGI app under uvicorn, and ministack verifying SigV4. Where the two answer a bad request with a
different status, both are stated (S3 refuses any change to a signed header with 403)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest
from objectstore_harness import HttpResult, StoreHarness, http_put, md5, past, sha

from baml_studio.objectstore import ObjectNotFound
from baml_studio.objectstore.port import sha256_b64

KEY = "evidence/v1/t/p/e/cas/values/ab/" + "ab" * 32 + ".bamlvalue.zst"
DATA = b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 4


def error_code(result: HttpResult) -> str:
    root = ET.fromstring(result.body)
    assert root.tag == "Error"
    assert root.findtext("Message")
    return root.findtext("Code") or ""


def assert_nothing_stored(harness: StoreHarness, key: str = KEY) -> None:
    with pytest.raises(ObjectNotFound):
        harness.store.head(key)
    assert harness.leftovers(key) == []


def by_kind(harness: StoreHarness, directory: object, s3: object) -> object:
    return directory if harness.kind == "directory" else s3


def test_presigned_put_stores_the_object(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    result = http_put(presigned.url, DATA, dict(presigned.required_headers))
    assert result.status == 200, result.body
    assert result.headers["etag"] == f'"{md5(DATA)}"'
    head = harness.store.head(KEY)
    assert (head.size, head.sha256, head.etag) == (len(DATA), sha(DATA), md5(DATA))
    assert result.headers["x-amz-version-id"] == head.version_id
    assert harness.store.get(KEY) == DATA


def test_presigned_put_description(harness: StoreHarness) -> None:
    before = datetime.now(UTC)
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    assert presigned.method == "PUT"
    assert dict(presigned.required_headers) == {
        "If-None-Match": "*",
        "x-amz-checksum-sha256": sha256_b64(sha(DATA)),
        "Content-Length": str(len(DATA)),
    }
    expected = before + timedelta(seconds=900)
    assert (
        expected - timedelta(seconds=2) <= presigned.expires_at <= expected + timedelta(seconds=2)
    )
    assert presigned.url.startswith("http://127.0.0.1:")


def test_reusing_a_url_after_success_is_412(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    assert http_put(presigned.url, DATA, dict(presigned.required_headers)).status == 200
    version = harness.store.head(KEY).version_id
    again = http_put(presigned.url, DATA, dict(presigned.required_headers))
    assert again.status == 412
    assert error_code(again) == "PreconditionFailed"
    assert harness.store.head(KEY).version_id == version


def test_wrong_body_of_the_signed_length_is_bad_digest(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    tampered = bytes(reversed(DATA))
    result = http_put(presigned.url, tampered, dict(presigned.required_headers))
    assert (result.status, error_code(result)) == (400, "BadDigest")
    assert_nothing_stored(harness)
    # a failed attempt does not use the URL up
    assert http_put(presigned.url, DATA, dict(presigned.required_headers)).status == 200


def test_wrong_body_with_its_own_checksum_is_refused(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    tampered = bytes(reversed(DATA))
    headers = {**presigned.required_headers, "x-amz-checksum-sha256": sha256_b64(sha(tampered))}
    result = http_put(presigned.url, tampered, headers)
    expected = by_kind(harness, (400, "BadDigest"), (403, "SignatureDoesNotMatch"))
    assert (result.status, error_code(result)) == expected
    assert_nothing_stored(harness)


@pytest.mark.parametrize("delta", [1, -1])
def test_wrong_length_is_refused(harness: StoreHarness, delta: int) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    body = DATA + b"!" if delta > 0 else DATA[:-1]
    headers = {
        **presigned.required_headers,
        "x-amz-checksum-sha256": sha256_b64(sha(body)),
        "Content-Length": str(len(body)),
    }
    result = http_put(presigned.url, body, headers)
    too = "EntityTooLarge" if delta > 0 else "EntityTooSmall"
    expected = by_kind(harness, (400, too), (403, "SignatureDoesNotMatch"))
    assert (result.status, error_code(result)) == expected
    assert_nothing_stored(harness)


def _with_query(url: str, name: str, change: str) -> str:
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    (value,) = query[name]
    query[name] = [change + value[len(change) :]]
    encoded = "&".join(f"{k}={v[0]}" for k, v in query.items())
    return urlunsplit(parts._replace(query=encoded))


def test_tampered_signature_is_403(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    name = by_kind(harness, "X-Baml-Signature", "X-Amz-Signature")
    signature = parse_qs(urlsplit(presigned.url).query)[str(name)][0]
    flipped = "0" if signature[0] != "0" else "1"
    result = http_put(
        _with_query(presigned.url, str(name), flipped), DATA, dict(presigned.required_headers)
    )
    assert (result.status, error_code(result)) == (403, "SignatureDoesNotMatch")
    assert_nothing_stored(harness)


def test_url_for_another_key_is_403(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    other = KEY.replace("/ab/", "/cd/")
    result = http_put(presigned.url.replace("/ab/", "/cd/"), DATA, dict(presigned.required_headers))
    assert (result.status, error_code(result)) == (403, "SignatureDoesNotMatch")
    assert_nothing_stored(harness, other)


def test_expired_url_is_403(harness: StoreHarness) -> None:
    presigned = harness.presign_signed_at(past(3600), KEY, len(DATA), sha(DATA), 60)
    assert presigned.expires_at < datetime.now(UTC)
    result = http_put(presigned.url, DATA, dict(presigned.required_headers))
    assert (result.status, error_code(result)) == (403, "AccessDenied")
    assert "expired" in result.body.decode()
    assert_nothing_stored(harness)


def test_missing_if_none_match_is_403(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    headers = {k: v for k, v in presigned.required_headers.items() if k != "If-None-Match"}
    result = http_put(presigned.url, DATA, headers)
    expected = by_kind(harness, "AccessDenied", "SignatureDoesNotMatch")
    assert (result.status, error_code(result)) == (403, expected)
    assert_nothing_stored(harness)


def test_missing_checksum_header_is_refused(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    headers = {k: v for k, v in presigned.required_headers.items() if k != "x-amz-checksum-sha256"}
    result = http_put(presigned.url, DATA, headers)
    expected = by_kind(harness, (400, "InvalidRequest"), (403, "SignatureDoesNotMatch"))
    assert (result.status, error_code(result)) == expected
    assert_nothing_stored(harness)


def test_signed_headers_cover_the_create_only_contract(harness: StoreHarness) -> None:
    presigned = harness.store.presign_put(KEY, len(DATA), sha(DATA), 900)
    query = parse_qs(urlsplit(presigned.url).query)
    if harness.kind == "s3":
        signed = set(query["X-Amz-SignedHeaders"][0].split(";"))
        assert {"if-none-match", "x-amz-checksum-sha256", "content-length"} <= signed
        assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    else:
        assert query["X-Baml-Content-Length"] == [str(len(DATA))]
        assert query["X-Baml-Checksum-Sha256"] == [sha(DATA)]
