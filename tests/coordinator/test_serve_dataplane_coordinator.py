"""``baml-studio serve dataplane --control-plane URL --workload-token T --tls-cert C --tls-key K``
as a process: the gateway and the query coordinator in one server, over HTTPS, verifying user
tokens with the control plane's published keys."""

from __future__ import annotations

import json
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "control"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from dataplane_process import dataplane_process
from projector_control_rig import SCOPE_A, ControlRig, control_plane

from baml_studio.control.identity import IssuedToken, TokenIssuer
from baml_studio.tokenfile import write_token_file
from tls_authority import Authority

BUDGET = {
    "max_wall_ms": 30_000,
    "max_result_rows": 1000,
    "max_result_bytes": 1 << 20,
    "max_private_bytes_read": 1 << 20,
}


COUNT = {
    "sql": "SELECT count(*) AS n FROM calls",
    "parameters": [],
    "catalog_version": "v1",
    "budget": BUDGET,
}


def user_token(rig: ControlRig) -> IssuedToken:
    """A user token of :data:`SCOPE_A` from the rig's control plane."""
    return TokenIssuer(rig.control.keys, rig.control.metastore).issue_user(
        SCOPE_A.tenant, SCOPE_A.project, [SCOPE_A.environment]
    )


@pytest.fixture
def served(
    tmp_path: Path, chdb_dsn: str, fact_database: str
) -> Iterator[tuple[str, ssl.SSLContext, ControlRig]]:
    authority = Authority(tmp_path, "dp")
    server = authority.issue("dataplane", server=True)
    context = ssl.create_default_context(cafile=str(authority.path))
    tls = ["--tls-cert", str(server.cert), "--tls-key", str(server.key)]
    with (
        control_plane(tmp_path / "control", chdb_dsn, fact_database) as rig,
        dataplane_process(
            tmp_path / "dataplane",
            rig.url,
            rig.token_a,
            *tls,
            "--studio-origin",
            "https://studio.example.com",
            verify=context,
        ) as url,
    ):
        yield url, context, rig


def test_the_dataplane_process_serves_queries_over_https(
    served: tuple[str, ssl.SSLContext, ControlRig],
) -> None:
    url, context, rig = served
    user = user_token(rig)
    body = COUNT
    with httpx.Client(verify=context, timeout=30) as client:
        answer = client.post(
            f"{url}/v1/query", json=body, headers={"Authorization": f"Bearer {user.token}"}
        )
        assert answer.status_code == 200, answer.text
        lines = [json.loads(line) for line in answer.text.splitlines()]
        assert lines[0] == {"n": 0}
        outcome = lines[-1]["queryOutcome"]
        assert outcome["resultState"] == "complete"
        assert outcome["snapshot"]["generation"] == rig.generation()
        assert outcome["snapshot"]["lanceVersion"] == 0  # nothing projected yet

        private = client.post(
            f"{url}/v1/query",
            json={**body, "sql": "SELECT call_id, args FROM calls"},
            headers={"Authorization": f"Bearer {user.token}"},
        )
        outcome = json.loads(private.text.splitlines()[-1])["queryOutcome"]
        assert outcome["resultState"] == "complete", outcome.get("error")
        refused = client.post(f"{url}/v1/query", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["code"]
        job = client.post(
            f"{url}/v1/query-jobs",
            json={**body, "mode": "background"},
            headers={"Authorization": f"Bearer {user.token}"},
        )
        assert job.status_code == 202 and job.json()["state"] in ("queued", "running", "succeeded")
        preflight = client.options(
            f"{url}/v1/query",
            headers={
                "Origin": "https://studio.example.com",
                "Access-Control-Request-Method": "POST",
            },
        )
        assert preflight.headers["access-control-allow-origin"] == "https://studio.example.com"


def test_a_workload_token_file_is_read_again_once_rotated(
    tmp_path: Path, chdb_dsn: str, fact_database: str
) -> None:
    """``--workload-token-file``: a coordinator whose workload token expired refuses a query
    (503 ``control_plane_refused``: retry), and the next query after the file holds a new
    token succeeds in the same process."""
    with control_plane(tmp_path / "control", chdb_dsn, fact_database) as rig:
        control = rig.control
        an_hour_ago = TokenIssuer(control.keys, control.metastore, clock=lambda: time.time() - 3700)
        expired = an_hour_ago.issue_workload("tn_a", "dep_a", "cell-1", ttl_s=3600).token
        token_file = tmp_path / "workload.token"
        write_token_file(token_file, expired)
        body = COUNT
        headers = {"Authorization": f"Bearer {user_token(rig).token}"}
        with (
            dataplane_process(
                tmp_path / "dataplane", rig.url, "", "--workload-token-file", str(token_file)
            ) as url,
            httpx.Client(timeout=30) as client,
        ):
            refused = client.post(f"{url}/v1/query", json=body, headers=headers)
            error = refused.json()["error"]
            assert refused.status_code == 503 and error["code"] == "control_plane_refused"
            assert "token_expired" in error["message"] and error["retryable"]

            write_token_file(token_file, rig.token_a)  # the rotation
            answer = client.post(f"{url}/v1/query", json=body, headers=headers)
            lines = [json.loads(line) for line in answer.text.splitlines()]
            assert lines[0] == {"n": 0}
            assert lines[-1]["queryOutcome"]["resultState"] == "complete"
