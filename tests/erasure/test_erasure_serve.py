"""``baml-studio serve dataplane --control-plane URL`` serves the erasure routes (the wiring):
a process, real user tokens, the erasures file under ``DIR/erasures/``."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "coordinator"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from dataplane_process import dataplane_process
from projector_control_rig import SCOPE_A, ControlRig, control_plane
from test_jobs_fakes import check_schema

from baml_studio.control.identity import TokenIssuer

EMPTY_RANGE = {"time_range": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}}


@pytest.fixture
def served(tmp_path: Path, chdb_dsn: str, fact_database: str) -> Iterator[tuple[str, ControlRig]]:
    with (
        control_plane(tmp_path / "control", chdb_dsn, fact_database) as rig,
        dataplane_process(tmp_path / "dataplane", rig.url, rig.token_a) as url,
    ):
        yield url, rig


def test_the_dataplane_process_serves_erasures(
    served: tuple[str, ControlRig], tmp_path: Path
) -> None:
    url, rig = served
    issuer = TokenIssuer(rig.control.keys, rig.control.metastore)
    scope = [SCOPE_A.environment]
    allowed = issuer.issue_user(SCOPE_A.tenant, SCOPE_A.project, scope, erasure=True).token
    denied = issuer.issue_user(SCOPE_A.tenant, SCOPE_A.project, scope).token
    with httpx.Client(timeout=30) as client:
        refused = client.post(
            f"{url}/v1/erasures",
            json=EMPTY_RANGE,
            headers={"Authorization": f"Bearer {denied}", "Idempotency-Key": "k"},
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
        created = client.post(
            f"{url}/v1/erasures",
            json=EMPTY_RANGE,
            headers={"Authorization": f"Bearer {allowed}", "Idempotency-Key": "k"},
        )
        assert created.status_code == 202, created.text
        erasure_id = created.json()["erasure_id"]
        deadline = time.monotonic() + 30
        while True:
            answer = client.get(
                f"{url}/v1/erasures/{erasure_id}", headers={"Authorization": f"Bearer {allowed}"}
            ).json()
            if answer["state"] == "succeeded" or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # polling the server's worker, bounded by the deadline
        check_schema("Erasure", answer)
        assert answer["state"] == "succeeded" and answer["streams_matched"] == 0
    assert (tmp_path / "dataplane" / "erasures" / "erasures.sqlite").is_file()
