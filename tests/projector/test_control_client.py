"""The workload API client against a real control plane (uvicorn on 127.0.0.1, chDB facts) and,
for throttling and protocol faults, small Starlette stubs."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st
from projector_control_rig import (
    SCOPE_A,
    SCOPE_B,
    ControlRig,
    PublicBatch,
    closed_port_url,
    control_plane,
    public_batch,
    serve,
    table,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baml_studio.projector.control_client import (
    ZSTD_LEVEL,
    ControlClient,
    SentRequest,
    encode_batch,
    new_request_id,
)
from baml_studio.projector.errors import (
    ControlPlaneAuthRefused,
    ControlPlaneNotFound,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    InactiveGeneration,
)
from baml_studio.publisher.client import retry_after_seconds


class Recorder:
    """An httpx request hook: every request the client sends, with its headers."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> None:
        with self._lock:
            self.requests.append(request)

    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


class Sleeps:
    """The client's backoff sleep, recorded instead of slept."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def make_client(
    url: str, token: Any, recorder: Recorder, *, hooks: tuple[Any, ...] = (), **kwargs: Any
) -> ControlClient:
    http = httpx.Client(timeout=30, event_hooks={"request": [recorder, *hooks]})
    kwargs.setdefault("sleep", Sleeps())
    return ControlClient(url, token, client=http, **kwargs)


@pytest.fixture
def rig(tmp_path: Path, chdb_dsn: str, fact_database: str) -> Iterator[ControlRig]:
    with control_plane(tmp_path, chdb_dsn, fact_database) as rig:
        yield rig


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def client(rig: ControlRig, recorder: Recorder) -> Iterator[ControlClient]:
    with make_client(rig.url, rig.token_a, recorder) as client:
        yield client


def assert_request_ids(recorder: Recorder) -> None:
    ids = [r.headers.get("x-baml-request-id") for r in recorder.requests]
    assert ids and all(ids), ids
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids)


# -- reads -----------------------------------------------------------------------------------


def test_projection_schemas_are_read_once_per_version(
    client: ControlClient, recorder: Recorder
) -> None:
    schemas = client.projection_schemas("v1")
    names = {r["relation"] for r in schemas["relations"]}
    assert names == {
        "threads_v1",
        "call_path_stats_v1",
        "calls_v1",
        "errors_v1",
        "function_definitions_v1",
        "health_v1",
    }
    schemas["relations"].clear()  # the caller's copy; the cache keeps its own
    assert client.projection_schemas("v1")["relations"]
    assert recorder.paths() == ["/projection-schemas/v1"]
    assert recorder.requests[0].headers["authorization"].startswith("Bearer ")
    assert_request_ids(recorder)


def test_unknown_catalog_version_is_refused_with_the_server_code(client: ControlClient) -> None:
    """A 404 is the client's configuration (a catalog version, a URL), never the evidence:
    ControlPlaneNotFound is a transient refusal, so a message that meets it is retried."""
    with pytest.raises(ControlPlaneNotFound) as caught:
        client.projection_schemas("v999")
    assert (caught.value.status, caught.value.code) == (404, "unknown_catalog_version")
    assert isinstance(caught.value, ControlPlaneRefused) and caught.value.transient


def test_active_generation_is_cached_until_invalidated(
    rig: ControlRig, client: ControlClient, recorder: Recorder
) -> None:
    first = client.active_generation(SCOPE_A)
    assert first == rig.generation()
    assert client.active_generation(SCOPE_A) == first
    assert recorder.paths() == ["/query-snapshots"]
    bumped = rig.bump()
    assert bumped != first
    assert client.active_generation(SCOPE_A) == first  # still cached
    client.invalidate_generation(SCOPE_A)
    assert client.active_generation(SCOPE_A) == bumped
    assert recorder.paths() == ["/query-snapshots"] * 2
    assert_request_ids(recorder)


def test_active_generation_cache_expires(rig: ControlRig, recorder: Recorder) -> None:
    now = [100.0]
    with make_client(
        rig.url, rig.token_a, recorder, generation_ttl_s=5.0, clock=lambda: now[0]
    ) as client:
        first = client.active_generation(SCOPE_A)
        bumped = rig.bump()
        now[0] += 4.9
        assert client.active_generation(SCOPE_A) == first
        now[0] += 0.2
        assert client.active_generation(SCOPE_A) == bumped
    assert len(recorder.requests) == 2


def test_snapshot_for_another_tenant_is_forbidden(client: ControlClient) -> None:
    with pytest.raises(ControlPlaneAuthRefused) as caught:
        client.snapshot(SCOPE_B)
    assert (caught.value.status, caught.value.code) == (403, "scope_forbidden")
    assert caught.value.transient  # the deployment's scope, not the request, is at fault


def test_a_bad_token_is_refused(rig: ControlRig, recorder: Recorder) -> None:
    with (
        make_client(rig.url, "not-a-token", recorder) as client,
        pytest.raises(ControlPlaneAuthRefused) as caught,
    ):
        client.projection_schemas()
    assert caught.value.status == 401 and caught.value.transient
    assert isinstance(caught.value, ControlPlaneRefused)  # what its callers catch
    assert len(recorder.requests) == 1


def test_a_callable_token_is_asked_again_after_a_401(rig: ControlRig, recorder: Recorder) -> None:
    tokens = iter(["expired-token", rig.token_a, rig.token_a])
    with make_client(rig.url, lambda: next(tokens), recorder) as client:
        assert client.projection_schemas()["catalog_version"] == "v1"
    sent = [r.headers["authorization"] for r in recorder.requests]
    assert sent == ["Bearer expired-token", f"Bearer {rig.token_a}"]


# -- batches ---------------------------------------------------------------------------------


def test_put_batch_writes_then_answers_200_for_a_repeat(
    rig: ControlRig, client: ControlClient, recorder: Recorder
) -> None:
    batch = public_batch("calls_v1", "exec_one", rows=5)
    generation = client.active_generation(SCOPE_A)
    first = client.put_batch(SCOPE_A, generation, batch)
    again = client.put_batch(SCOPE_A, generation, batch)
    assert (first.status, first.created, first.row_count) == (201, True, 5)
    assert (again.status, again.created, again.row_count) == (200, False, 5)
    assert first.batch_id == "exec_one.calls_v1.0" and first.generation == generation
    assert first.content_digest == again.content_digest == encode_batch(batch.table).digest
    put = recorder.requests[-1]
    assert put.method == "PUT" and put.url.path == "/projection-batches/exec_one.calls_v1.0"
    expected = {
        "content-encoding": "zstd",
        "content-type": "application/vnd.apache.arrow.stream",
        "x-baml-root-id": "exec_one",
        "x-baml-project-id": "prj",
        "x-baml-environment-id": "prod",
        "x-baml-relation": "calls_v1",
        "x-baml-partition": "0",
        "x-baml-projection-generation": generation,
        "x-baml-content-digest": first.content_digest,
    }
    assert {k: put.headers[k] for k in expected} == expected
    assert_request_ids(recorder)


def test_a_different_digest_for_a_visible_batch_is_refused(
    client: ControlClient, recorder: Recorder
) -> None:
    generation = client.active_generation(SCOPE_A)
    client.put_batch(SCOPE_A, generation, public_batch("threads_v1", "exec_two"))
    changed = public_batch("threads_v1", "exec_two", salt="-changed")
    sent = len(recorder.requests)
    with pytest.raises(ControlPlaneRefused) as caught:
        client.put_batch(SCOPE_A, generation, changed)
    assert (caught.value.status, caught.value.code) == (409, "batch_digest_conflict")
    assert len(recorder.requests) == sent + 1  # terminal: not retried
    request_id = recorder.requests[-1].headers["x-baml-request-id"]
    assert f"request_id={request_id}" in str(caught.value)


def test_a_batch_off_the_registered_schema_is_refused(client: ControlClient) -> None:
    batch = public_batch("calls_v1", "exec_three")
    wrong = PublicBatch(
        "calls_v1", 0, batch.batch_id, batch.root_id, batch.table.drop_columns(["fqn"])
    )
    with pytest.raises(ControlPlaneRefused) as caught:
        client.put_batch(SCOPE_A, client.active_generation(SCOPE_A), wrong)
    assert (caught.value.status, caught.value.code) == (400, "schema_mismatch")
    assert '"missing_fields": ["fqn"]' in str(caught.value)  # the server's details


def test_a_stale_generation_raises_inactive_generation_with_the_new_one(
    rig: ControlRig, client: ControlClient, recorder: Recorder
) -> None:
    old = client.active_generation(SCOPE_A)
    new = rig.bump()
    with pytest.raises(InactiveGeneration) as caught:
        client.put_batch(SCOPE_A, old, public_batch("errors_v1", "exec_four"))
    assert caught.value.active_generation == new
    assert caught.value.transient
    sent = len(recorder.requests)
    assert client.active_generation(SCOPE_A) == new  # learnt from the 409, no snapshot
    assert len(recorder.requests) == sent
    assert client.put_batch(SCOPE_A, new, public_batch("errors_v1", "exec_four")).created


def test_put_batches_sends_in_parallel_and_acks_in_order(
    rig: ControlRig, recorder: Recorder
) -> None:
    concurrency = 4
    barrier = threading.Barrier(concurrency, timeout=20)
    arrived = [0]
    lock = threading.Lock()

    def hold_first_puts(request: httpx.Request) -> None:
        if request.method != "PUT":
            return
        with lock:
            arrived[0] += 1
            wait = arrived[0] <= concurrency
        if wait:
            barrier.wait()  # only passes if `concurrency` PUTs are in flight at once

    client = make_client(rig.url, rig.token_a, recorder, hooks=(hold_first_puts,))
    batches = [
        public_batch(relation, f"exec_p{i}", partition=i % 2)
        for i, relation in enumerate(["calls_v1", "threads_v1", "errors_v1", "health_v1"] * 2)
    ]
    generation = client.active_generation(SCOPE_A)
    acks = client.put_batches(SCOPE_A, generation, batches, concurrency=concurrency)
    assert [a.batch_id for a in acks] == [b.batch_id for b in batches]
    assert all(a.status == 201 for a in acks)
    again = client.put_batches(SCOPE_A, generation, batches, concurrency=concurrency)
    assert [a.status for a in again] == [200] * len(batches)
    client.close()
    assert_request_ids(recorder)


def test_put_batches_raises_the_first_failure(client: ControlClient) -> None:
    good = public_batch("calls_v1", "exec_ok")
    bad = public_batch("calls_v1", "exec_bad")
    # headers (and the batch id they derive) of a root other than the rows'
    bad = PublicBatch("calls_v1", 0, "exec_other_root.calls_v1.0", "exec_other_root", bad.table)
    generation = client.active_generation(SCOPE_A)
    with pytest.raises(ControlPlaneRefused) as caught:
        client.put_batches(SCOPE_A, generation, [good, bad], concurrency=2)
    assert caught.value.code == "root_mismatch"
    assert client.put_batches(SCOPE_A, generation, [], concurrency=2) == []


# -- erasure ---------------------------------------------------------------------------------


def test_erase_roots_sends_1000_roots_per_request(
    rig: ControlRig, client: ControlClient, recorder: Recorder
) -> None:
    generation = client.active_generation(SCOPE_A)
    batch = public_batch("calls_v1", "exec_erased")
    assert client.put_batch(SCOPE_A, generation, batch).created
    roots = [f"exec_{i:05d}" for i in range(2499)] + ["exec_erased", "exec_00001"]
    ack = client.erase_roots(SCOPE_A, generation, roots, "erasure-42")
    erasures = [r for r in recorder.requests if r.url.path == "/projection-erasures"]
    assert len(erasures) == 3 and ack.requests == 3
    assert len(ack.root_ids) == 2500 and "exec_erased" in ack.root_ids
    keys = [r.headers["idempotency-key"] for r in erasures]
    assert keys == ["erasure-42:1/3", "erasure-42:2/3", "erasure-42:3/3"]
    # the ledger row went with the facts: the same batch is new again
    assert client.put_batch(SCOPE_A, generation, batch).created
    assert client.erase_roots(SCOPE_A, generation, ["exec_erased"], "e").requests == 1
    assert recorder.requests[-1].headers["idempotency-key"] == "e"
    assert client.erase_roots(SCOPE_A, generation, [], "e").requests == 0
    assert_request_ids(recorder)


def test_erasure_needs_a_sane_idempotency_key(client: ControlClient) -> None:
    with pytest.raises(ValueError, match="idempotency_key"):
        client.erase_roots(SCOPE_A, "gen_1", ["exec_x"], "")


# -- faults ----------------------------------------------------------------------------------


def test_a_control_plane_that_is_down_is_retried_then_unavailable(recorder: Recorder) -> None:
    sleeps = Sleeps()
    with make_client(
        closed_port_url(), "token", recorder, retries=3, backoff_s=0.01, sleep=sleeps
    ) as client:
        with pytest.raises(ControlPlaneUnavailable) as caught:
            client.projection_schemas()
        assert caught.value.transient
        assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(recorder.requests) == 4
    assert len(sleeps.delays) == 3 and all(0 <= d <= 0.04 for d in sleeps.delays)
    assert_request_ids(recorder)


def test_backoff_grows_exponentially_up_to_its_bound(recorder: Recorder) -> None:
    sleeps = Sleeps()
    client = make_client(
        closed_port_url(),
        "token",
        recorder,
        retries=6,
        backoff_s=0.5,
        backoff_max_s=4.0,
        sleep=sleeps,
        rand=lambda: 1.0,
    )
    with client, pytest.raises(ControlPlaneUnavailable):
        client.active_generation(SCOPE_A)
    assert sleeps.delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


class Throttling:
    """A stub that answers ``failures`` times ``status`` with ``Retry-After``, then the real
    ``ProjectionSchemaSet`` shape."""

    def __init__(self, failures: int, status: int = 503, retry_after: str = "2") -> None:
        self.failures = failures
        self.status = status
        self.retry_after = retry_after
        self.seen = 0

    async def handle(self, request: Request) -> Response:
        self.seen += 1
        if self.seen <= self.failures:
            body = {
                "error": {
                    "code": "dependency_unavailable",
                    "message": "the fact store is unavailable",
                    "request_id": request.headers.get("x-baml-request-id", ""),
                    "retryable": True,
                    "details": {},
                }
            }
            headers = {"Retry-After": self.retry_after}
            return JSONResponse(body, status_code=self.status, headers=headers)
        return JSONResponse({"catalog_version": "v1", "relations": [{"relation": "x"}]})


def stub(handler: Any) -> Starlette:
    return Starlette(routes=[Route("/projection-schemas/{v}", handler, methods=["GET"])])


@pytest.mark.parametrize("status", [503, 429])
def test_throttling_is_retried_after_retry_after(status: int, recorder: Recorder) -> None:
    throttling = Throttling(failures=2, status=status, retry_after="2")
    sleeps = Sleeps()
    with (
        serve(stub(throttling.handle)) as url,
        make_client(url, "token", recorder, backoff_s=0.001, sleep=sleeps) as client,
    ):
        assert client.projection_schemas()["catalog_version"] == "v1"
    assert throttling.seen == 3
    assert sleeps.delays == [2.0, 2.0]
    assert_request_ids(recorder)


def test_retry_after_is_bounded_and_retries_end(recorder: Recorder) -> None:
    throttling = Throttling(failures=100, retry_after="3600")
    sleeps = Sleeps()
    with (
        serve(stub(throttling.handle)) as url,
        make_client(
            url,
            "token",
            recorder,
            retries=2,
            backoff_s=0.001,
            retry_after_max_s=0.25,
            sleep=sleeps,
        ) as client,
    ):
        with pytest.raises(ControlPlaneUnavailable) as caught:
            client.projection_schemas()
        assert caught.value.status == 503 and "dependency_unavailable" in str(caught.value)
    assert throttling.seen == 3
    assert sleeps.delays == [0.25, 0.25]


RETRY_AFTER_TEXT = (
    st.text(max_size=40)
    | st.sampled_from(["²", "¹⁰", "٣", "１２", "9" * 400, "-1", "1.5"])
    | st.integers(0, 10**400).map(str)
)


@settings(max_examples=150, deadline=None)
@given(retry_after=RETRY_AFTER_TEXT)
@example(retry_after="²")
def test_any_retry_after_text_is_a_bounded_wait_or_the_own_backoff(retry_after: str) -> None:
    """A malformed ``Retry-After`` (``"²"``: a digit to ``str.isdigit``, not to ``int``) is
    ignored for the client's own backoff; a readable one is bounded by ``retry_after_max_s``."""

    def throttled(request: httpx.Request) -> httpx.Response:
        headers = [(b"Retry-After", retry_after.encode())]
        return httpx.Response(503, json={"error": {}}, headers=headers)

    sleeps = Sleeps()
    http = httpx.Client(transport=httpx.MockTransport(throttled))
    client = ControlClient(
        "http://control", "token", client=http, retries=1, backoff_s=0.5, sleep=sleeps,
        retry_after_max_s=2.0, rand=lambda: 1.0,
    )  # fmt: skip
    with client, pytest.raises(ControlPlaneUnavailable) as caught:
        client.projection_schemas()
    assert caught.value.status == 503
    expected = retry_after_seconds(retry_after)
    assert sleeps.delays == [0.5 if expected is None else max(0.5, min(expected, 2.0))]


def test_a_2xx_that_breaks_the_contract_is_unavailable_not_a_crash(recorder: Recorder) -> None:
    async def html(request: Request) -> Response:
        return Response("<html>proxy</html>", media_type="text/html")

    with serve(stub(html)) as url, make_client(url, "token", recorder) as client:
        with pytest.raises(ControlPlaneUnavailable) as caught:
            client.projection_schemas()
        assert "without a JSON object" in str(caught.value)
    assert len(recorder.requests) == 1


def test_logs_name_ids_and_never_tokens(
    rig: ControlRig, client: ControlClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="baml_studio.projector.control_client")
    generation = client.active_generation(SCOPE_A)
    client.put_batch(SCOPE_A, generation, public_batch("calls_v1", "exec_logged"))
    with pytest.raises(ControlPlaneRefused):
        client.snapshot(SCOPE_B)
    text = caplog.text
    assert "batch_id=exec_logged.calls_v1.0" in text and "relation=calls_v1" in text
    assert "request_id=" in text and "status=201" in text
    assert rig.token_a not in text and "Bearer" not in text
    assert "call_id_exec_logged" not in text  # no row content


# -- pure helpers ----------------------------------------------------------------------------


def test_encode_batch_digests_the_uncompressed_stream() -> None:
    encoded = encode_batch(table("health_v1", "exec_h"))
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(encoded.body)
    assert len(raw) == encoded.raw_bytes
    assert encoded.digest == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_encode_batch_reuses_a_compressor_per_thread_with_the_same_bytes() -> None:
    """Bodies from the thread's reused compressor, on several threads at once, are exactly a
    fresh compressor's, and each frame declares its size (the control plane allocates once)."""
    tables = [table(r, f"exec_{i}") for i in range(40) for r in ("health_v1", "calls_v1")]

    def fresh(t: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as writer:
            writer.write_table(t)
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(sink.getvalue().to_pybytes())

    expected = [fresh(t) for t in tables]
    results: dict[int, list[bytes]] = {}

    def encode_all(n: int) -> None:
        results[n] = [encode_batch(t).body for t in tables]

    threads = [threading.Thread(target=encode_all, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[n] == expected for n in range(4))
    params = zstandard.get_frame_parameters(expected[0])
    assert params.content_size == encode_batch(tables[0]).raw_bytes


def test_request_ids_are_uuid7_and_time_ordered() -> None:
    texts = [new_request_id() for _ in range(200)]
    ids = [uuid.UUID(text) for text in texts]
    assert [str(i) for i in ids] == texts  # the canonical lower-case 8-4-4-4-12 form
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 200
    millis = [i.int >> 80 for i in ids]
    assert millis == sorted(millis)


def test_constructor_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="http"):
        ControlClient("ftp://example", "t")
    with pytest.raises(ValueError, match="negative"):
        ControlClient("http://127.0.0.1:1", "t", retries=-1)


# -- batches on the asyncio sender (a client that owns its connections) ---------------------


def owned_client(url: str, token: str, sent: list[SentRequest], **kwargs: Any) -> ControlClient:
    return ControlClient(url, token, on_request=sent.append, **kwargs)


def test_owned_client_sends_batches_on_its_event_loop(rig: ControlRig) -> None:
    sent: list[SentRequest] = []
    batches = [
        public_batch(relation, f"exec_a{i}", partition=i % 2)
        for i, relation in enumerate(["calls_v1", "threads_v1", "errors_v1", "health_v1"] * 5)
    ]
    with owned_client(rig.url, rig.token_a, sent) as client:
        generation = client.active_generation(SCOPE_A)
        acks = client.put_batches(SCOPE_A, generation, batches, concurrency=8)
        assert [a.batch_id for a in acks] == [b.batch_id for b in batches]
        assert [a.status for a in acks] == [201] * len(batches)
        again = client.put_batches(SCOPE_A, generation, batches, concurrency=8)
        assert [a.status for a in again] == [200] * len(batches)
        assert client._async_sender is not None  # the asyncio path, not the thread pool
        assert client._senders is None
    puts = [r for r in sent if r.method == "PUT"]
    assert len(puts) == 2 * len(batches)
    ids = [r.headers["x-baml-request-id"] for r in sent]
    assert len(set(ids)) == len(ids) and all(uuid.UUID(i).version == 7 for i in ids)
    for request in puts:
        assert request.headers["content-encoding"] == "zstd"
        raw = zstandard.ZstdDecompressor().decompress(request.content)
        assert (
            request.headers["x-baml-content-digest"] == "sha256:" + hashlib.sha256(raw).hexdigest()
        )


def test_owned_client_raises_the_first_failure_and_learns_a_new_generation(
    rig: ControlRig,
) -> None:
    sent: list[SentRequest] = []
    good = public_batch("calls_v1", "exec_g1")
    bad = public_batch("calls_v1", "exec_g2")
    # headers (and the batch id they derive) of a root other than the rows'
    bad = PublicBatch("calls_v1", 0, "exec_other_root.calls_v1.0", "exec_other_root", bad.table)
    with owned_client(rig.url, rig.token_a, sent) as client:
        old = client.active_generation(SCOPE_A)
        with pytest.raises(ControlPlaneRefused) as caught:
            client.put_batches(SCOPE_A, old, [good, bad, good], concurrency=1)
        assert caught.value.code == "root_mismatch"
        assert len([r for r in sent if r.method == "PUT"]) == 2  # the third never started
        new = rig.bump()
        with pytest.raises(InactiveGeneration) as stale:
            client.put_batches(SCOPE_A, old, [good, good], concurrency=2)
        assert stale.value.active_generation == new
        assert client.active_generation(SCOPE_A) == new  # learnt from the 409
        acks = client.put_batches(
            SCOPE_A, new, [good, public_batch("health_v1", "exec_g1")], concurrency=2
        )
        assert [a.status for a in acks] == [201, 201]


def test_owned_client_retries_an_unreachable_control_plane_then_gives_up() -> None:
    sent: list[SentRequest] = []
    batches = [public_batch("calls_v1", f"exec_u{i}") for i in range(3)]
    with (
        owned_client(closed_port_url(), "token", sent, retries=2, backoff_s=0.001) as client,
        pytest.raises(ControlPlaneUnavailable) as caught,
    ):
        client.put_batches(SCOPE_A, "gen_1", batches, concurrency=3)
    assert "unreachable" in str(caught.value)
    per_batch: dict[str, int] = {}
    for request in sent:
        per_batch[request.path] = per_batch.get(request.path, 0) + 1
    assert per_batch and all(count == 3 for count in per_batch.values())  # 1 + 2 retries


def test_owned_client_takes_a_2xx_batch_answer_without_json_as_unavailable() -> None:
    """The asyncio sender builds its responses without an httpx request; a proxy page in
    place of a ProjectionBatchResponse is still the typed transient error, naming the call."""

    async def html(request: Request) -> Response:
        return Response("<html>proxy</html>", media_type="text/html")

    app = Starlette(routes=[Route("/projection-batches/{batch_id}", html, methods=["PUT"])])
    sent: list[SentRequest] = []
    with serve(app) as url, owned_client(url, "token", sent) as client:
        with pytest.raises(ControlPlaneUnavailable) as caught:
            client.put_batches(
                SCOPE_A,
                "gen_1",
                [public_batch("calls_v1", "exec_p1"), public_batch("calls_v1", "exec_p2")],
                concurrency=2,  # more than one batch at once: the asyncio sender
            )
        assert "put_batch" in str(caught.value) and "without a JSON object" in str(caught.value)
        assert client._async_sender is not None
    assert {r.method for r in sent} == {"PUT"}


def test_owned_client_keeps_exactly_concurrency_in_flight_and_raises_the_earliest_failure() -> None:
    """The asyncio sender's senders share one iterator: never more than ``concurrency``
    batches in flight, that many while enough remain, acks in order; after failures no batch
    starts and the earliest failed batch's error is raised."""
    state = {"now": 0, "most": 0}
    delay = [0.05]  # how long a success takes: long once failures must answer first
    started: list[str] = []
    failing: set[str] = set()

    async def put(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        started.append(batch_id)
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await request.body()
        if batch_id not in failing:  # the failures answer first
            await asyncio.sleep(delay[0])
        state["now"] -= 1
        if batch_id in failing:
            code = f"refused_{batch_id}"
            error = {"code": code, "message": "no", "request_id": "r"}
            return JSONResponse({"error": error}, status_code=400)
        answer = {
            "batch_id": batch_id,
            "root_id": request.headers["x-baml-root-id"],
            "generation": "gen_1",
            "row_count": 1,
            "content_digest": request.headers["x-baml-content-digest"],
            "state": "visible",
        }
        return JSONResponse(answer, status_code=201)

    app = Starlette(routes=[Route("/projection-batches/{batch_id}", put, methods=["PUT"])])
    batches = [public_batch("calls_v1", f"exec_c{i:02d}") for i in range(10)]
    with serve(app) as url, owned_client(url, "token", []) as client:
        acks = client.put_batches(SCOPE_A, "gen_1", batches, concurrency=4)
        assert [a.batch_id for a in acks] == [b.batch_id for b in batches]
        assert state["most"] == 4
        started.clear()
        delay[0] = 0.5
        failing.update({batches[2].batch_id, batches[1].batch_id})
        with pytest.raises(ControlPlaneRefused) as caught:
            client.put_batches(SCOPE_A, "gen_1", batches, concurrency=4)
        assert caught.value.code == f"refused_{batches[1].batch_id}"
        assert started and set(started) <= {b.batch_id for b in batches[:4]}
        assert len(started) == 4  # the first four at once; none after the failures
