"""``POST /v1/erasures`` and ``GET /v1/erasures/{id}`` over HTTP with real user tokens: every
refusal is an ``ErrorResponse`` and deletes nothing; idempotency; the ``Erasure`` shape; the
execution-id and time-range selectors erase whole streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from erasure_rig import (
    PREFIX,
    SCOPE,
    ErasureRig,
    assert_gone,
    carrier,
    erasure_rig,
    local_streams,
    other_store,
    served,
    wait_until,
)
from projector_control_rig import SCOPE_A
from projector_fixtures import copy_store, upload_store, workload_store
from test_jobs_fakes import check_schema

from baml_studio.publisher import Publisher

__all__ = ["other_store", "workload_store"]


def post(url: str, token: str | None, body: Any, key: str | None = "key-1", **headers: str) -> Any:
    sent = {"X-Baml-Request-Id": "req-1", **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if key is not None:
        sent["Idempotency-Key"] = key
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/v1/erasures", content=content, headers=sent, timeout=60)


def get(url: str, token: str, erasure_id: str) -> Any:
    headers = {"Authorization": f"Bearer {token}", "X-Baml-Request-Id": "req-1"}
    return httpx.get(f"{url}/v1/erasures/{erasure_id}", headers=headers, timeout=60)


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    check_schema("ErrorResponse", body)
    assert body["error"]["code"] == code, body


def state(rig: ErasureRig) -> tuple[Any, ...]:
    return (rig.keys(), rig.fact_roots(), rig.lance_execution_ids(), rig.lance_cids())


def test_refusals_are_error_responses_and_delete_nothing(
    tmp_path: Path, chdb_dsn: str, workload_store: Path, other_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig, served(rig) as url:
        stream = rig.streams[0]
        good = {"process_euids": [stream.euid]}
        # another tenant's stream in the same bucket, under its own scope's prefix
        upload_store(other_store, rig.bucket, SCOPE_A)
        foreign = rig.keys(f"evidence/v1/{SCOPE_A.tenant}/")
        assert foreign
        before = state(rig)

        token = rig.user_token()
        assert_error(post(url, None, good), 401, "missing_token")
        assert_error(post(url, "garbage", good), 401, "invalid_token")
        no_permission = rig.user_token(erasure=False)
        assert_error(post(url, no_permission, good), 403, "permission_denied")
        other_tenant = rig.user_token(scope=SCOPE_A)
        assert_error(post(url, other_tenant, good), 403, "scope_not_served")
        assert_error(post(url, token, good, key=None), 400, "missing_idempotency_key")
        assert_error(post(url, token, good, key="k" * 257), 400, "invalid_idempotency_key")
        assert_error(
            post(url, token, good, **{"X-Baml-Environment-Id": "env_other"}), 403, "scope_mismatch"
        )
        malformed: list[tuple[Any, str]] = [
            (b"not json", "invalid_selector"),
            ({}, "invalid_selector"),
            ({"process_euids": None}, "invalid_selector"),
            ({"process_euids": []}, "invalid_selector"),
            ({"process_euids": ["XYZ"]}, "invalid_selector"),
            ({"process_euids": [stream.euid.upper()]}, "invalid_selector"),
            ({"process_euids": [7]}, "invalid_selector"),
            ({"execution_ids": [""]}, "invalid_selector"),
            ({"process_euids": [stream.euid], "execution_ids": ["x"]}, "invalid_selector"),
            ({"process_euids": [stream.euid], "tenant_id": SCOPE.tenant}, "invalid_selector"),
            ({"process_euids": [stream.euid, stream.euid]}, "duplicate_selector_item"),
            ({"time_range": {"start": "2026-01-01T00:00:00"}}, "invalid_selector"),
            ({"time_range": {"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00"}},
             "invalid_selector"),  # no offset
            ({"time_range": {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}},
             "invalid_time_range"),
            ({"process_euids": ["0" * 32]}, "unknown_stream"),
            ({"process_euids": [foreign_euid(foreign)]}, "unknown_stream"),  # another tenant's
            ({"execution_ids": ["baml_thread_1_nope"]}, "unknown_execution"),
        ]  # fmt: skip
        for body, code in malformed:
            assert_error(post(url, token, body), 400, code)
        assert_error(get(url, no_permission, "era_x"), 403, "permission_denied")
        assert_error(get(url, token, "era_nope"), 404, "erasure_not_found")

        assert state(rig) == before
        assert rig.keys(f"evidence/v1/{SCOPE_A.tenant}/") == foreign
        assert rig.manager._store.unfinished() == []  # reason: nothing was even queued


def foreign_euid(keys: set[str]) -> str:
    key = next(k for k in keys if "/streams/" in k)
    return key.split("/streams/")[1].split("/")[0]


def test_idempotency_key_and_get(tmp_path: Path, chdb_dsn: str, workload_store: Path) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig, served(rig) as url:
        packs, other = carrier(rig, rig.streams)
        token = rig.user_token()
        body = {"process_euids": [other.euid]}
        first = post(url, token, body, key="same")
        assert first.status_code == 202, first.text
        erasure = first.json()
        check_schema("Erasure", erasure)
        assert erasure["state"] in ("queued", "running", "succeeded")
        assert erasure["selector"] == body and erasure["streams_matched"] == 1
        assert first.headers["location"].endswith(f"/v1/erasures/{erasure['erasure_id']}")

        again = post(url, token, body, key="same")
        assert again.status_code == 202 and again.json()["erasure_id"] == erasure["erasure_id"]
        changed = post(url, token, {"process_euids": [packs.euid]}, key="same")
        assert_error(changed, 409, "idempotency_key_reused")

        def finished() -> Any:
            answer = get(url, token, erasure["erasure_id"]).json()
            return answer if answer["state"] == "succeeded" else None

        done = wait_until(finished, 120)
        assert done is not None
        check_schema("Erasure", done)
        assert done["streams_matched"] == done["streams_deleted"] == 1
        assert_gone(rig, [other])
        # the same key still answers the same erasure after its stream is gone
        assert post(url, token, body, key="same").json()["erasure_id"] == erasure["erasure_id"]
        rig.ingest.control.metastore.create_environment(SCOPE.tenant, SCOPE.project, "env_other")
        elsewhere = rig.user_token(environments=("env_other",))
        assert_error(get(url, elsewhere, erasure["erasure_id"]), 404, "erasure_not_found")


def test_an_execution_id_or_a_time_range_erases_whole_streams(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig:
        first, second = rig.streams
        one = sorted(first.executions)[0]
        record = rig.erase(json.dumps({"execution_ids": [one]}).encode())
        assert record.state == "succeeded" and record.streams == (first.euid,)
        assert_gone(rig, [first])  # every execution of the stream, not just the one named

        nothing = rig.erase(
            b'{"time_range": {"start": "1990-01-01T00:00:00Z", "end": "1990-01-02T00:00:00Z"}}'
        )
        assert nothing.state == "succeeded" and nothing.to_json()["streams_matched"] == 0
        assert_gone(rig, [first])

        everything = rig.erase(
            b'{"time_range": {"start": "2000-01-01T00:00:00Z", "end": "2100-01-01T00:00:00Z"}}'
        )
        assert everything.state == "succeeded" and everything.streams == (second.euid,)
        assert_gone(rig, [first, second])


def test_an_unprojected_stream_is_erased_by_execution_id_and_never_projected(
    tmp_path: Path, chdb_dsn: str, workload_store: Path, other_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig:
        root = copy_store(other_store, tmp_path / "late")
        ingest = rig.ingest
        assert Publisher(root, ingest.gateway_url, ingest.publisher_token).flush().complete
        late = local_streams(root)
        victim = late[0]
        assert not victim.executions & rig.fact_roots()  # shipped, not projected
        record = rig.erase(json.dumps({"execution_ids": [sorted(victim.executions)[0]]}).encode())
        assert record.state == "succeeded" and record.streams == (victim.euid,)
        rig.drain()  # the queued notifications find their objects gone
        rig.stores.append(root)
        rig.streams += late
        assert_gone(rig, [victim])
        assert not rig.keys(f"{PREFIX}streams/{victim.euid}/")


@pytest.mark.parametrize("flag", ["--euid", "--execution-id"])
def test_the_cli_erases_and_waits(
    tmp_path: Path, chdb_dsn: str, workload_store: Path, flag: str
) -> None:
    from click.testing import CliRunner

    from baml_studio.cli import main

    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig, served(rig) as url:
        stream = rig.streams[0]
        value = stream.euid if flag == "--euid" else sorted(stream.executions)[0]
        token = rig.user_token()
        runner = CliRunner()
        args = ["erase", "--remote", url, "--token", token, flag, value, "--wait",
                "--interval", "50ms"]  # fmt: skip
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output + str(result.exception)
        erasure = json.loads(result.stdout)
        assert erasure["state"] == "succeeded" and erasure["streams_deleted"] == 1
        assert_gone(rig, [stream])
        rerun = runner.invoke(main, args)  # the derived key: the same erasure again
        assert (
            rerun.exit_code == 0 and json.loads(rerun.stdout)["erasure_id"] == erasure["erasure_id"]
        )

        denied = runner.invoke(main, [*args[:4], rig.user_token(erasure=False), *args[5:]])
        assert denied.exit_code == 5 and "permission_denied" in denied.stderr
        bad = runner.invoke(main, [*args[:5], "--euid", "nothex"])
        assert bad.exit_code == 2 and "invalid_selector" in bad.stderr
        both = runner.invoke(main, [*args[:5], "--euid", stream.euid, "--from", "2026-01-01"])
        assert both.exit_code == 2 and "exactly one" in both.output
