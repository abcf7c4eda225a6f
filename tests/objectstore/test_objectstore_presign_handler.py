"""The directory bucket's HMAC signer and its presigned-PUT handler, as pure functions, plus the
edges of the ASGI app that only raw HTTP reaches."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from objectstore_harness import SECRET, MutableClock, StoreHarness, sha

from baml_studio.objectstore import SignatureExpired, SignatureInvalid
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.objectstore.port import PresignedPut, sha256_b64
from baml_studio.objectstore.presign import (
    PARAM_ALGORITHM,
    PARAM_EXPIRES,
    PARAM_SHA256,
    PARAM_SIGNATURE,
    PARAM_SIZE,
    PresignSigner,
    string_to_sign,
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


# --- hostile query strings and headers ---------------------------------------------------------

PARAMS = [PARAM_ALGORITHM, PARAM_EXPIRES, PARAM_SIZE, PARAM_SHA256, PARAM_SIGNATURE]
NOW = 1_000_000.0
SIGNER = PresignSigner(SECRET, "http://gw", lambda: NOW)
SIGNED_QUERY = query_of(SIGNER.sign("bkt", KEY, 5, sha(b"hello"), 60))
NUMBERS = (
    st.integers(min_value=-(10**25), max_value=10**25).map(str)
    | st.from_regex(r"[-+ 0-9_]{1,24}", fullmatch=True)
    | st.sampled_from(["1" * 5000, "\u0661\u0662", "0x10", "1e3", "00060", ""])
)
VALUES = st.text(max_size=80) | NUMBERS | st.sampled_from(sorted(SIGNED_QUERY.values()))
QUERIES = (
    st.dictionaries(st.sampled_from(PARAMS) | st.text(max_size=12), VALUES, max_size=7)
    | st.builds(lambda name, value: {**SIGNED_QUERY, name: value}, st.sampled_from(PARAMS), VALUES)
    | st.builds(
        lambda name: {k: v for k, v in SIGNED_QUERY.items() if k != name}, st.sampled_from(PARAMS)
    )
    | st.builds(lambda name, value: {**SIGNED_QUERY, name: value}, st.text(max_size=12), VALUES)
)


def _resigned(expires: str, size: str) -> dict[str, str]:
    """The signed query with ``expires`` and ``size`` as given and a signature made with the
    secret over what ``int`` reads in them (what a lenient verifier would accept)."""
    query = {**SIGNED_QUERY, PARAM_EXPIRES: expires, PARAM_SIZE: size}
    try:
        exp, length = int(expires), int(size)
    except ValueError:
        return query
    message = string_to_sign("bkt", KEY, length, sha(b"hello"), exp)
    query[PARAM_SIGNATURE] = hmac.new(SECRET, message, hashlib.sha256).hexdigest()
    return query


def verify_or_refuse(query: dict[str, str]) -> None:
    try:
        signed = SIGNER.verify("bkt", KEY, query)
    except (SignatureInvalid, SignatureExpired) as exc:
        assert str(exc)
        return
    assert str(signed.expires) == query[PARAM_EXPIRES] and str(signed.size) == query[PARAM_SIZE]
    assert signed.expires >= NOW and signed.sha256 == query[PARAM_SHA256]


@settings(max_examples=400, deadline=None)
@given(QUERIES)
def test_fuzz_any_query_string_verifies_or_is_refused(query: dict[str, str]) -> None:
    verify_or_refuse(query)


@settings(max_examples=300, deadline=None)
@given(st.builds(_resigned, NUMBERS, NUMBERS))
def test_fuzz_numbers_signed_with_the_secret_verify_only_in_canonical_form(
    query: dict[str, str],
) -> None:
    verify_or_refuse(query)


@pytest.mark.parametrize(
    "expires", ["+1000060", " 1000060", "1_000_060", "01000060", "-1", "-" + "9" * 30]
)
def test_non_canonical_or_negative_expiry_is_invalid_even_when_signed(expires: str) -> None:
    with pytest.raises(SignatureInvalid, match="X-Baml-Expires must be 1 to 19 decimal digits"):
        SIGNER.verify("bkt", KEY, _resigned(expires, "5"))


HEADER_NAMES = ["If-None-Match", "Content-Length", "x-amz-checksum-sha256", "content-length"]
HEADER_VALUES = (
    st.text(max_size=60)
    | st.sampled_from(["*", "5", " 5 ", "1" * 5000, "0" * 30 + "5", sha256_b64(sha(DATA))])
    | st.from_regex(r"[ 0-9]{0,25}", fullmatch=True)
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    change=st.dictionaries(st.sampled_from(HEADER_NAMES) | st.text(max_size=8), HEADER_VALUES),
    drop=st.sets(st.sampled_from(["If-None-Match", "Content-Length", "x-amz-checksum-sha256"])),
    body=st.sampled_from([DATA, b"", DATA[:-1], b"x" * len(DATA)]),
)
def test_fuzz_headers_of_a_presigned_put_get_an_s3_answer(
    store: DirectoryBucket, change: dict[str, str], drop: set[str], body: bytes
) -> None:
    presigned = store.presign_put(KEY, len(DATA), sha(DATA), 60)
    headers = {k: v for k, v in presigned.required_headers.items() if k not in drop}
    headers.update(change)
    response = store.handle_presigned_put("evidence-test", KEY, query_of(presigned), headers, body)
    if response.status == 200:
        assert body == DATA and store.get(KEY) == DATA
        return
    assert response.status in (400, 403, 411, 412)
    assert code_of(response) in {
        "InvalidArgument", "EntityTooLarge", "EntityTooSmall", "IncompleteBody", "InvalidRequest",
        "InvalidDigest", "BadDigest", "AccessDenied", "MissingContentLength", "PreconditionFailed",
    }  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(bucket=st.text(max_size=12), key=st.text(max_size=40), query=QUERIES)
def test_fuzz_error_bodies_are_xml_whatever_the_path_holds(
    bucket: str, key: str, query: dict[str, str]
) -> None:
    config = DirectoryBucketConfig(Path("/nonexistent"), "evidence-test", "http://gw", SECRET)
    store = DirectoryBucket(config, clock=lambda: NOW)
    response = store.handle_presigned_put(bucket, key, query, {}, b"")
    assert response.status in (403, 404) and code_of(response)


def test_a_content_length_of_thousands_of_digits_is_400(store: DirectoryBucket) -> None:
    headers = dict(store.presign_put(KEY, len(DATA), sha(DATA), 60).required_headers)
    headers["Content-Length"] = "1" * 5000
    response = _put(store, headers)
    assert (response.status, code_of(response)) == (400, "InvalidArgument")
    assert "is not a byte count" in (ET.fromstring(response.body).findtext("Message") or "")


def test_a_control_character_in_the_key_still_gives_an_xml_error(store: DirectoryBucket) -> None:
    response = store.handle_presigned_put("evidence-test", "a\x01b\ud800", {}, {}, b"")
    assert (response.status, code_of(response)) == (403, "SignatureDoesNotMatch")
    assert ET.fromstring(response.body).findtext("Resource") == "/evidence-test/a\ufffdb\ufffd"
