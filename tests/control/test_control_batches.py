"""PUT /projection-batches: headers, digest, schema, idempotency, conflicts, generations."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pytest
from control_rig import SCOPE_A, Rig, batch, ipc_bytes, sha256
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest
from baml_studio.control.ingest import parse_headers
from baml_studio.control.models import ErrorResponse, ProjectionBatchResponse
from baml_studio.control.schemas import PUBLIC_RELATION_NAMES
from baml_studio.control.service import TtlCache


def _count(rig: Rig, relation: str, scope=SCOPE_A) -> int:
    gen = rig.control.metastore.active_generation(scope)
    return rig.control.facts.count(relation, scope, gen)


def _error(answer, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    parsed = ErrorResponse.model_validate(answer.json())
    assert parsed.error.code == code, parsed.error


@pytest.mark.parametrize("relation", sorted(PUBLIC_RELATION_NAMES))
def test_every_relation_round_trips(rig: Rig, relation: str) -> None:
    table = batch(relation, "exec_r1", rows=4)
    answer = rig.put(rig.token_a, SCOPE_A, relation, "exec_r1", table)
    assert answer.status_code == 201, answer.text
    body = ProjectionBatchResponse.model_validate(answer.json())
    assert (body.state, body.row_count, body.root_id) == ("visible", 4, "exec_r1")
    gen = rig.control.metastore.active_generation(SCOPE_A)
    assert body.generation == gen
    stored = rig.control.facts.rows(relation, SCOPE_A, gen)
    assert stored.num_rows == 4
    assert sorted(stored.to_pylist(), key=repr) == sorted(table.to_pylist(), key=repr)


def test_repeat_is_200_and_writes_nothing(rig: Rig) -> None:
    table = batch("calls_v1", "exec_r2")
    first = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r2", table)
    second = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r2", table)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert _count(rig, "calls_v1") == 3


def test_reused_batch_id_with_other_digest_is_409(rig: Rig) -> None:
    rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r3", batch("calls_v1", "exec_r3", 3))
    answer = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r3", batch("calls_v1", "exec_r3", 5))
    _error(answer, 409, "batch_digest_conflict")
    assert _count(rig, "calls_v1") == 3


def test_same_batch_from_two_clients_at_once(rig: Rig) -> None:
    table = batch("calls_v1", "exec_r4", 50)
    answers: list[int] = []
    barrier = threading.Barrier(2)

    def send() -> None:
        barrier.wait()
        answers.append(rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r4", table).status_code)

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 201]
    assert _count(rig, "calls_v1") == 50


def test_stale_generation_is_409_and_new_one_accepted(rig: Rig) -> None:
    old = rig.control.metastore.active_generation(SCOPE_A)
    new = rig.control.metastore.bump_generation(SCOPE_A)
    table = batch("calls_v1", "exec_r5")
    stale = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r5", table, generation=old)
    _error(stale, 409, "inactive_generation")
    assert stale.json()["error"]["details"]["active_generation"] == new
    fresh = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r5", table, generation=new)
    assert fresh.status_code == 201
    assert fresh.json()["generation"] == new
    assert rig.control.facts.count("calls_v1", SCOPE_A, old) == 0


def test_a_visible_batch_repeated_after_a_generation_switch_is_409(rig: Rig) -> None:
    """A repeat answered from the ledger cache is checked against the active generation too:
    a 200 would tell a projector its batch is in the new generation when it is not."""
    old = rig.control.metastore.active_generation(SCOPE_A)
    table = batch("threads_v1", "exec_r6")
    first = rig.put(rig.token_a, SCOPE_A, "threads_v1", "exec_r6", table, generation=old)
    assert first.status_code == 201
    again = rig.put(rig.token_a, SCOPE_A, "threads_v1", "exec_r6", table, generation=old)
    assert again.status_code == 200
    assert rig.control.facts.stats.cache_hits == 1
    new = rig.control.metastore.bump_generation(SCOPE_A)
    stale = rig.put(rig.token_a, SCOPE_A, "threads_v1", "exec_r6", table, generation=old)
    _error(stale, 409, "inactive_generation")
    assert stale.json()["error"]["details"]["active_generation"] == new


def _with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.append_column(name, values)


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda t: _with_column(t, "extra", pa.array(["x"] * t.num_rows)), "schema_mismatch"),
        (
            lambda t: _with_column(t, "call_site_file", pa.array(["a.py"] * t.num_rows)),
            "private_column",
        ),
        (lambda t: _with_column(t, "args", pa.array(["{}"] * t.num_rows)), "private_column"),
        (lambda t: t.drop_columns(["fqn"]), "schema_mismatch"),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("function_id"),
                "function_id",
                pa.array([1] * t.num_rows, pa.int64()),
            ),
            "schema_mismatch",
        ),
        (lambda t: t.select(list(reversed(t.column_names))), "schema_mismatch"),
    ],
    ids=["extra", "call_site_file", "args", "missing", "wrong_type", "order"],
)
def test_bad_schema_is_refused_and_nothing_written(rig: Rig, mutate, code: str) -> None:
    table = mutate(batch("calls_v1", "exec_r6"))
    answer = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r6", table)
    _error(answer, 400, code)
    assert _count(rig, "calls_v1") == 0


@pytest.mark.parametrize("rows", [3, 600], ids=["compared in Python", "compared by compute"])
@pytest.mark.parametrize("others", ["all", "one"])
def test_rows_of_another_root_are_refused(rig: Rig, rows: int, others: str) -> None:
    table = batch("calls_v1", "exec_other" if others == "all" else "exec_r7", rows=rows)
    if others == "one":
        ids = ["exec_r7"] * (rows - 1) + ["exec_other"]
        at = table.schema.get_field_index("execution_id")
        table = table.set_column(at, table.schema.field(at), pa.array(ids, pa.string()))
    answer = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r7", table)
    _error(answer, 400, "root_mismatch")
    assert (rows if others == "all" else 1) == int(answer.json()["error"]["message"].split()[0])
    assert _count(rig, "calls_v1") == 0


def test_digest_must_match_uncompressed_body(rig: Rig) -> None:
    table = batch("calls_v1", "exec_r8")
    wrong = sha256(ipc_bytes(table) + b"x")
    _error(
        rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r8", table, digest=wrong),
        400,
        "digest_mismatch",
    )


@pytest.mark.parametrize(
    ("header", "value", "code"),
    [
        ("Content-Encoding", "gzip", "unsupported_encoding"),
        ("X-Baml-Relation", "processes_v1", "unknown_relation"),
        ("X-Baml-Partition", "-1", "invalid_partition"),
        ("X-Baml-Content-Digest", "md5:abc", "invalid_digest"),
        ("X-Baml-Root-Id", "", "missing_header"),
        ("X-Baml-Request-Id", "", "missing_request_id"),
        # the path is /projection-batches/exec_r9.calls_v1.0: headers that derive another id
        ("X-Baml-Partition", "7", "batch_id_mismatch"),
        ("X-Baml-Relation", "health_v1", "batch_id_mismatch"),
        ("X-Baml-Root-Id", "exec_other", "batch_id_mismatch"),
    ],
)
def test_bad_headers(rig: Rig, header: str, value: str, code: str) -> None:
    table = batch("calls_v1", "exec_r9")
    raw = ipc_bytes(table)
    import zstandard

    headers = rig.headers(
        rig.token_a,
        **{
            "Content-Encoding": "zstd",
            "X-Baml-Root-Id": "exec_r9",
            "X-Baml-Project-Id": "prj",
            "X-Baml-Environment-Id": "prod",
            "X-Baml-Relation": "calls_v1",
            "X-Baml-Partition": "0",
            "X-Baml-Projection-Generation": "gen_1",
            "X-Baml-Content-Digest": sha256(raw),
        },
    )
    headers[header] = value
    answer = rig.client.put(
        "/projection-batches/exec_r9.calls_v1.0",
        content=zstandard.ZstdCompressor().compress(raw),
        headers=headers,
    )
    _error(answer, 400, code)


def test_one_executions_rows_land_once_whatever_id_the_path_holds(rig: Rig) -> None:
    """The path's batch id must be the one the headers derive: the same rows PUT under
    ``.7`` and ``bogus`` were stored three times (an audit found it)."""
    table = batch("health_v1", "exec_r11")
    before = _count(rig, "health_v1")
    assert rig.put(rig.token_a, SCOPE_A, "health_v1", "exec_r11", table).status_code == 201
    assert _count(rig, "health_v1") == before + table.num_rows
    for other in ("exec_r11.health_v1.7", "bogus", "exec_r11.calls_v1.0", "exec_r11.health_v1.00"):
        answer = rig.put(rig.token_a, SCOPE_A, "health_v1", "exec_r11", table, batch_id=other)
        _error(answer, 400, "batch_id_mismatch")
        assert "exec_r11.health_v1.0" in answer.json()["error"]["message"]
    assert _count(rig, "health_v1") == before + table.num_rows


def test_body_that_is_not_zstd_or_arrow(rig: Rig) -> None:
    import zstandard

    not_arrow = b"not arrow"
    cases = [
        (b"not zstd", sha256(b"not zstd")),
        (zstandard.ZstdCompressor().compress(not_arrow), sha256(not_arrow)),
    ]
    for body, digest in cases:
        headers = rig.headers(
            rig.token_a,
            **{
                "Content-Encoding": "zstd",
                "X-Baml-Root-Id": "exec_r10",
                "X-Baml-Project-Id": "prj",
                "X-Baml-Environment-Id": "prod",
                "X-Baml-Relation": "calls_v1",
                "X-Baml-Partition": "0",
                "X-Baml-Projection-Generation": "gen_1",
                "X-Baml-Content-Digest": digest,
            },
        )
        answer = rig.client.put("/projection-batches/exec_r10.calls_v1.0", content=body,
                                headers=headers)  # fmt: skip
        _error(answer, 400, "invalid_body")


def _revoked_after_a_batch(rig: Rig, prefix: str) -> tuple[list[float], Callable[[int], Any]]:
    """A fake-clock batch checks cache (1 s), a workload token whose first batch (root
    ``prefix`` 1) went in at 0 s and which is revoked since; ``put(n)`` sends root ``prefix``
    ``n`` with it."""
    now = [0.0]
    rig.control._batch_checks = TtlCache(1.0, clock=lambda: now[0])
    issued = rig.issuer.issue_workload("tn_a", "dep_a", "cell-1")

    def put(n: int) -> Any:
        root = f"{prefix}{n}"
        return rig.put(issued.token, SCOPE_A, "health_v1", root, batch("health_v1", root))

    first = put(1)
    assert first.status_code == 201, first.text
    rig.control.metastore.revoke_token(issued.token_id)
    # other operations never use the cache
    assert rig.snapshot(issued.token, SCOPE_A).status_code == 401
    return now, put


def test_a_revoked_token_reaches_batches_for_at_most_the_cache_time(rig: Rig) -> None:
    now, put = _revoked_after_a_batch(rig, "exec_rv")
    now[0] = 0.5  # within the cache time: the verification is reused
    inside = put(2)
    assert inside.status_code == 201, inside.text
    now[0] = 1.01
    _error(put(3), 401, "token_revoked")


def test_batch_checks_cache_nothing_when_disabled_and_never_a_refusal() -> None:
    now = [0.0]
    loads: list[int] = []

    def load() -> int:
        loads.append(1)
        return len(loads)

    off = TtlCache(0, clock=lambda: now[0])
    assert [off.get("k", load), off.get("k", load)] == [1, 2]
    on = TtlCache(1.0, clock=lambda: now[0], capacity=2)
    assert [on.get("k", load), on.get("k", load)] == [3, 3]
    now[0] = 1.5
    assert on.get("k", load) == 4

    def refuse() -> int:
        raise ValueError("refused")

    for _ in range(2):
        with pytest.raises(ValueError):
            on.get("bad", refuse)
    on.get("a", load)
    on.get("b", load)  # over capacity: the expired and then every entry go
    assert on.get("b", load) == 6


def test_an_answer_in_steady_use_is_reloaded_before_it_expires() -> None:
    now = [0.0]
    cache = TtlCache(1.0, clock=lambda: now[0])
    loads: list[float] = []
    release = threading.Event()

    def reload() -> str:
        release.wait(5)
        loads.append(now[0])
        return f"loaded at {now[0]}"

    cache.put("k", "first")
    now[0] = 0.4  # more than half its life left: no reload
    assert cache.peek("k", reload) == "first"
    cache.close()
    assert loads == []
    now[0] = 0.6  # less than half left: one reload however many uses
    assert [cache.peek("k", reload) for _ in range(5)] == ["first"] * 5
    release.set()
    cache.close()  # waits for the reload
    assert loads == [0.6]
    now[0] = 1.3  # past the first answer's life, inside the reloaded one's
    assert cache.peek("k") == "loaded at 0.6"
    now[0] = 1.61  # a peek without refresh never reloads: the answer expires
    assert cache.peek("k") is None
    cache.close()
    assert loads == [0.6]


def test_closing_waits_for_queued_reloads_and_a_later_use_reloads_again() -> None:
    now = [0.0]
    cache = TtlCache(1.0, clock=lambda: now[0])
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "slow"

    for key in ("a", "b"):
        cache.put(key, "first")
    now[0] = 0.6
    assert cache.peek("a", slow) == "first"
    assert started.wait(5)
    assert cache.peek("b", lambda: "b reloaded") == "first"  # queued behind a's reload
    closing = threading.Thread(target=cache.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive()  # close waits for the reload under way
    release.set()
    closing.join(5)
    assert not closing.is_alive()
    now[0] = 1.3  # both reloads ran (at 0.6): the first answers would have expired
    assert (cache.peek("a"), cache.peek("b")) == ("slow", "b reloaded")
    assert cache.peek("b", lambda: "again") == "b reloaded"  # last half: reloads again
    cache.close()
    assert cache.peek("b") == "again"


def test_a_refused_reload_forgets_the_answer() -> None:
    now = [0.0]
    cache = TtlCache(1.0, clock=lambda: now[0])

    def refuse() -> str:
        raise ValueError("refused now")

    cache.put("k", "answer")
    now[0] = 0.7
    assert cache.peek("k", refuse) == "answer"  # used once more while the reload runs
    cache.close()
    assert cache.peek("k", refuse) is None  # forgotten before its life ended
    off = TtlCache(0, clock=lambda: now[0])
    off.put("k", "answer")
    assert off.peek("k", refuse) is None


def test_a_revoked_token_is_refused_once_its_answer_is_reloaded(rig: Rig) -> None:
    now, put = _revoked_after_a_batch(rig, "exec_rl")
    now[0] = 0.6  # the remembered answer serves this batch and is reloaded meanwhile
    inside = put(2)
    assert inside.status_code == 201, inside.text
    rig.control._batch_checks.close()  # the reload has finished: refused, so forgotten
    now[0] = 0.7  # still inside the first answer's life, yet refused
    _error(put(3), 401, "token_revoked")


def test_checks_run_on_the_loop_only_when_cached_and_small(rig: Rig) -> None:
    from control_rig import zstd

    from baml_studio.control.service import INLINE_CHECK_BYTES

    table = batch("calls_v1", "exec_inline", rows=2)
    raw = ipc_bytes(table)
    gen = rig.control.metastore.active_generation(SCOPE_A)
    headers = {
        name.lower(): value
        for name, value in rig.headers(
            rig.token_a,
            **{
                "Content-Encoding": "zstd",
                "Content-Type": "application/vnd.apache.arrow.stream",
                "X-Baml-Root-Id": "exec_inline",
                "X-Baml-Project-Id": SCOPE_A.project,
                "X-Baml-Environment-Id": SCOPE_A.environment,
                "X-Baml-Relation": "calls_v1",
                "X-Baml-Partition": "0",
                "X-Baml-Projection-Generation": gen,
                "X-Baml-Content-Digest": sha256(raw),
            },
        ).items()
    }
    bid = "exec_inline.calls_v1.0"
    # nothing remembered yet: the route checks on a worker thread (metastore reads)
    assert rig.control.accept_batch_cached(headers, bid, zstd(raw)) is None
    first = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_inline", table)
    assert first.status_code == 201, first.text
    accepted = rig.control.accept_batch_cached(headers, bid, zstd(raw))
    assert accepted is not None and accepted.key.batch_id == bid
    assert accepted.key.scope == SCOPE_A and accepted.table.equals(table)
    # a body too large to decode on the loop, or another token: the worker-thread path
    assert rig.control.accept_batch_cached(headers, bid, b"\0" * (INLINE_CHECK_BYTES + 1)) is None
    other = {**headers, "authorization": f"Bearer {rig.token_b}"}
    assert rig.control.accept_batch_cached(other, bid, zstd(raw)) is None


def test_the_spec_server_path_takes_the_same_batches(rig: Rig) -> None:
    """The batch route is matched before the router (a fast path): under the spec's server
    path too, and the same batch id is one batch on both."""
    table = batch("calls_v1", "exec_r30", rows=2)
    first = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r30", table, prefix="/studio-data/v1")
    again = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r30", table)
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert _count(rig, "calls_v1") == 2


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("PUT", "/projection-batches/", 404, "not_found"),
        ("PUT", "/projection-batches/a/b", 404, "not_found"),
        ("PUT", "/studio-data/v1/projection-batches/", 404, "not_found"),
        ("GET", "/projection-batches/b1", 405, "method_not_allowed"),
        ("POST", "/studio-data/v1/projection-batches/b1", 405, "method_not_allowed"),
        # a stray slash is an unknown path: it was a 307 whose Location came from Host
        ("GET", "/projection-schemas/v1/", 404, "not_found"),
        ("GET", "/studio-data/v1/projection-schemas/v1/", 404, "not_found"),
        ("POST", "/query-snapshots/", 404, "not_found"),
        ("GET", "/healthz/", 404, "not_found"),
    ],
)
def test_other_requests_near_the_batch_route_get_the_routers_answers(
    rig: Rig, method: str, path: str, status: int, code: str
) -> None:
    headers = {**rig.headers(rig.token_a), "Host": "evil.example.com"}
    answer = rig.client.request(method, path, headers=headers, follow_redirects=False)
    _error(answer, status, code)
    assert "location" not in answer.headers


def test_an_unexpected_failure_of_a_batch_is_a_500_error_response(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(rig.control, "put_batch_async", broken)
    table = batch("calls_v1", "exec_r31", rows=1)
    answer = rig.put(rig.token_a, SCOPE_A, "calls_v1", "exec_r31", table)
    _error(answer, 500, "internal_error")
    assert "control plane internal error" in caplog.text and "boom" not in answer.text


def test_a_schema_that_differs_only_in_metadata_is_accepted_as_registered(rig: Rig) -> None:
    table = batch("threads_v1", "exec_r32", rows=2)
    field = table.schema.field(0).with_metadata({b"note": b"client"})
    table = table.cast(table.schema.set(0, field)).replace_schema_metadata({b"who": b"test"})
    answer = rig.put(rig.token_a, SCOPE_A, "threads_v1", "exec_r32", table)
    assert answer.status_code == 201, answer.text
    gen = rig.control.metastore.active_generation(SCOPE_A)
    stored = rig.control.facts.rows("threads_v1", SCOPE_A, gen)
    assert stored.num_rows == 2 and stored.schema.metadata is None


BATCH_HEADERS = (
    "Content-Encoding",
    "X-Baml-Root-Id",
    "X-Baml-Project-Id",
    "X-Baml-Environment-Id",
    "X-Baml-Relation",
    "X-Baml-Partition",
    "X-Baml-Projection-Generation",
    "X-Baml-Content-Digest",
)
LATIN1_DIGITS = ["²", "³", "¹", "1²", "0¹", "0", "7", ""]
"""Latin-1's superscripts are digits to ``str.isdigit``, not to ``int``."""
LATIN1_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40
) | st.sampled_from(LATIN1_DIGITS)
"""What a server can read from a header: latin-1."""


def _latin1_header_put(
    rig: Rig, root_id: str, replaced: dict[str, str]
) -> tuple[httpx.Response, dict[str, str]]:
    """The answer to a batch of ``root_id`` sent with the ``replaced`` headers' text as latin-1,
    and the headers as the server reads them."""
    import zstandard

    raw = ipc_bytes(batch("calls_v1", root_id))
    headers = rig.headers(
        rig.token_a,
        **{
            "Content-Encoding": "zstd",
            "X-Baml-Root-Id": root_id,
            "X-Baml-Project-Id": "prj",
            "X-Baml-Environment-Id": "prod",
            "X-Baml-Relation": "calls_v1",
            "X-Baml-Partition": "0",
            "X-Baml-Projection-Generation": rig._generation(SCOPE_A),
            "X-Baml-Content-Digest": sha256(raw),
            **replaced,
        },
    )

    async def put() -> httpx.Response:
        # straight to the app: the test client re-encodes header text as UTF-8, a server does not
        transport = httpx.ASGITransport(app=rig.client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            return await client.put(
                f"/projection-batches/{root_id}.calls_v1.0",
                content=zstandard.ZstdCompressor().compress(raw),
                headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
            )

    assert rig.client.portal is not None
    return rig.client.portal.call(put), {k.lower(): v for k, v in headers.items()}


@pytest.mark.parametrize("partition", ["²", "³", "¹"])
def test_a_partition_of_latin1_superscript_digits_is_a_400(rig: Rig, partition: str) -> None:
    answer, _ = _latin1_header_put(rig, "exec_r40", {"X-Baml-Partition": partition})
    _error(answer, 400, "invalid_partition")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(replaced=st.fixed_dictionaries({}, optional=dict.fromkeys(BATCH_HEADERS, LATIN1_TEXT)))
@example(replaced={"X-Baml-Partition": "²"})
def test_any_batch_header_text_gets_a_typed_refusal_or_is_written(
    rig: Rig, replaced: dict[str, str]
) -> None:
    """The headers' own refusal (``parse_headers``'s 400) when they have one; otherwise the
    batch is written, or refused for its scope, generation or digest: never a 500."""
    answer, sent = _latin1_header_put(rig, "exec_r41", replaced)
    try:
        parse_headers(sent, "exec_r41.calls_v1.0")
    except BadRequest as exc:
        _error(answer, 400, exc.code)
        return
    if answer.status_code in (200, 201):
        ProjectionBatchResponse.model_validate(answer.json())
        return
    assert 400 <= answer.status_code < 500, answer.text
    ErrorResponse.model_validate(answer.json())
