"""The directory bucket's HMAC signer and its presigned-PUT handler, as pure functions, plus the
edges of the ASGI app that only raw HTTP reaches."""

from __future__ import annotations

import http.client
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from objectstore_harness import SECRET, MutableClock, StoreHarness, sha

from baml_studio.objectstore import SignatureExpired, SignatureInvalid
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.objectstore.port import PresignedPut, sha256_b64
from baml_studio.objectstore.presign import (
    PARAM_EXPIRES,
    PARAM_SHA256,
    PARAM_SIGNATURE,
    PARAM_SIZE,
    PresignSigner,
)
from baml_studio.objectstore.presigned_http import HttpResponse

DATA = b"payload for the handler"
KEY = "evidence/v1/k ey+/x.bin"


def query_of(presigned: PresignedPut) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(presigned.url).query))


def code_of(response: HttpResponse) -> str:
    root = ET.fromstring(response.body)
    assert root.findtext("Resource")
    assert root.findtext("RequestId")
    return root.findtext("Code") or ""


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock()


@pytest.fixture
def store(tmp_path: Path, clock: MutableClock) -> DirectoryBucket:
    config = DirectoryBucketConfig(tmp_path, "evidence-test", "http://127.0.0.1:9/", SECRET)
    return DirectoryBucket(config, clock=clock)


def test_signer_round_trip_and_url_shape(clock: MutableClock) -> None:
    signer = PresignSigner(SECRET, "http://gw:8080/", clock)
    presigned = signer.sign("bkt", KEY, 5, sha(b"hello"), 60)
    assert presigned.url.startswith("http://gw:8080/bucket/bkt/evidence/v1/k%20ey%2B/x.bin?")
    signed = signer.verify("bkt", KEY, query_of(presigned))
    assert (signed.size, signed.sha256, signed.expires) == (5, sha(b"hello"), int(clock()) + 60)


@pytest.mark.parametrize(
    ("bucket", "key", "param", "value"),
    [
        ("other", KEY, None, None),
        ("bkt", KEY + "x", None, None),
        ("bkt", KEY, PARAM_SIZE, "6"),
        ("bkt", KEY, PARAM_SHA256, sha(b"other")),
        ("bkt", KEY, PARAM_EXPIRES, "99999999999"),
        ("bkt", KEY, PARAM_SIGNATURE, "0" * 64),
        ("bkt", KEY, PARAM_SIZE, "five"),
        ("bkt", KEY, PARAM_SHA256, "not-hex"),
        ("bkt", KEY, "X-Baml-Algorithm", "AWS4-HMAC-SHA256"),
    ],
)
def test_any_change_breaks_the_signature(
    clock: MutableClock, bucket: str, key: str, param: str | None, value: str | None
) -> None:
    signer = PresignSigner(SECRET, "http://gw", clock)
    query = query_of(signer.sign("bkt", KEY, 5, sha(b"hello"), 60))
    if param is not None and value is not None:
        query[param] = value
    with pytest.raises(SignatureInvalid):
        signer.verify(bucket, key, query)


def test_missing_parameter_and_other_secret_are_invalid(clock: MutableClock) -> None:
    signer = PresignSigner(SECRET, "http://gw", clock)
    query = query_of(signer.sign("bkt", KEY, 5, sha(b"hello"), 60))
    other = PresignSigner(b"x" * 32, "http://gw", clock)
    with pytest.raises(SignatureInvalid):
        other.verify("bkt", KEY, query)
    del query[PARAM_SIGNATURE]
    with pytest.raises(SignatureInvalid, match="missing or malformed"):
        signer.verify("bkt", KEY, query)


def test_expiry_is_inclusive_of_the_last_second(clock: MutableClock) -> None:
    signer = PresignSigner(SECRET, "http://gw", lambda: 1000.0)
    query = query_of(signer.sign("bkt", KEY, 5, sha(b"hello"), 60))
    at_expiry = PresignSigner(SECRET, "http://gw", lambda: 1060.0)
    assert at_expiry.verify("bkt", KEY, query).expires == 1060
    after = PresignSigner(SECRET, "http://gw", lambda: 1060.5)
    with pytest.raises(SignatureExpired, match="re-authorize"):
        after.verify("bkt", KEY, query)


def _put(
    store: DirectoryBucket, headers: dict[str, str] | None = None, body: bytes = DATA
) -> HttpResponse:
    presigned = store.presign_put(KEY, len(DATA), sha(DATA), 60)
    sent = dict(presigned.required_headers) if headers is None else headers
    return store.handle_presigned_put("evidence-test", KEY, query_of(presigned), sent, body)


def test_handler_accepts_any_header_case(store: DirectoryBucket) -> None:
    headers = {
        "if-none-match": "*",
        "X-AMZ-CHECKSUM-SHA256": sha256_b64(sha(DATA)),
        "content-length": str(len(DATA)),
    }
    response = _put(store, headers)
    assert response.status == 200
    assert response.headers["x-amz-checksum-sha256"] == sha256_b64(sha(DATA))


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"Content-Length": None}, 411, "MissingContentLength"),
        ({"Content-Length": "twelve"}, 400, "InvalidArgument"),
        ({"x-amz-checksum-sha256": "!!!"}, 400, "InvalidDigest"),
        ({"x-amz-checksum-sha256": sha256_b64(sha(b"x"))[:-4]}, 400, "InvalidDigest"),
        ({"x-amz-checksum-sha256": sha256_b64(sha(b"x"))}, 400, "BadDigest"),
        ({"If-None-Match": '"abc"'}, 403, "AccessDenied"),
    ],
)
def test_handler_header_errors(
    store: DirectoryBucket, change: dict[str, str | None], status: int, code: str
) -> None:
    headers = dict(store.presign_put(KEY, len(DATA), sha(DATA), 60).required_headers)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    response = _put(store, headers)
    assert (response.status, code_of(response)) == (status, code)
    assert response.headers["Content-Type"] == "application/xml"


def test_handler_incomplete_body(store: DirectoryBucket) -> None:
    response = _put(store, body=DATA[:-1])
    assert (response.status, code_of(response)) == (400, "IncompleteBody")


def test_handler_another_bucket_is_404(store: DirectoryBucket, tmp_path: Path) -> None:
    other_config = DirectoryBucketConfig(tmp_path, "other-bucket", "http://127.0.0.1:9", SECRET)
    other = DirectoryBucket(other_config)
    presigned = other.presign_put(KEY, len(DATA), sha(DATA), 60)
    response = store.handle_presigned_put(
        "other-bucket", KEY, query_of(presigned), dict(presigned.required_headers), DATA
    )
    assert (response.status, code_of(response)) == (404, "NoSuchBucket")


def test_handler_transient_failure_is_503_with_retry_after(
    store: DirectoryBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(key: str, data: bytes, sha256: str) -> None:
        raise ObjectStoreUnavailable("disk went away", key=key)

    monkeypatch.setattr(store, "put_if_absent", unavailable)
    response = _put(store)
    assert (response.status, code_of(response)) == (503, "ServiceUnavailable")
    assert response.headers["Retry-After"] == "1"


def test_error_messages_are_escaped_xml(store: DirectoryBucket) -> None:
    headers = dict(store.presign_put(KEY, len(DATA), sha(DATA), 60).required_headers)
    headers["Content-Length"] = "<&>"
    response = _put(store, headers)
    assert "<&>" in (ET.fromstring(response.body).findtext("Message") or "")


def _raw_request(base_url: str, method: str, path: str, chunked: bool = False) -> int:
    host, port = urlsplit(base_url).netloc.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        if chunked:
            connection.putrequest(method, path)
            connection.putheader("Transfer-Encoding", "chunked")
            connection.endheaders()
            connection.send(b"5\r\nhello\r\n0\r\n\r\n")
        else:
            connection.request(method, path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_app_routes_only_presigned_puts(dir_harness: StoreHarness) -> None:
    presigned = dir_harness.store.presign_put("k", 5, sha(b"hello"), 60)
    parts = urlsplit(presigned.url)
    base = f"{parts.scheme}://{parts.netloc}"
    target = f"{parts.path}?{parts.query}"
    assert _raw_request(base, "GET", target) == 405
    assert _raw_request(base, "PUT", "/elsewhere/k") == 404
    assert _raw_request(base, "PUT", target, chunked=True) == 411
