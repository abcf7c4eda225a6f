"""``baml-studio serve dataplane --control-plane URL --workload-token T --tls-cert C --tls-key K``
as a process: the gateway and the query coordinator in one server, over HTTPS, verifying user
tokens with the control plane's published keys."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "control"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from projector_control_rig import SCOPE_A, ControlRig, control_plane
from test_tls import Authority

from baml_studio.control.identity import TokenIssuer

CLI = [sys.executable, "-m", "baml_studio.cli"]
BUDGET = {
    "max_wall_ms": 30_000,
    "max_result_rows": 1000,
    "max_result_bytes": 1 << 20,
    "max_private_bytes_read": 1 << 20,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(
    tmp_path: Path, chdb_dsn: str, fact_database: str
) -> Iterator[tuple[str, ssl.SSLContext, ControlRig]]:
    authority = Authority(tmp_path, "dp")
    server = authority.issue("dataplane", server=True)
    with control_plane(tmp_path / "control", chdb_dsn, fact_database) as rig:
        port = _free_port()
        process = subprocess.Popen(
            [*CLI, "serve", "dataplane", "--data", str(tmp_path / "dataplane"), "--port",
             str(port), "--control-plane", rig.url, "--tls-cert", str(server.cert),
             "--tls-key", str(server.key), "--studio-origin", "https://studio.example.com"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "BAML_WORKLOAD_TOKEN": rig.token_a},
        )  # fmt: skip
        context = ssl.create_default_context(cafile=str(authority.path))
        url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/v1/publisher/config", verify=context, timeout=1)
                break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"serve dataplane did not start: {process.stderr.read()!r}")
            time.sleep(0.1)  # readiness poll of the child process, bounded by the deadline
        try:
            yield url, context, rig
        finally:
            process.terminate()
            process.wait(timeout=20)


def test_the_dataplane_process_serves_queries_over_https(
    served: tuple[str, ssl.SSLContext, ControlRig],
) -> None:
    url, context, rig = served
    control = rig.control
    user = TokenIssuer(control.keys, control.metastore).issue_user(
        SCOPE_A.tenant, SCOPE_A.project, [SCOPE_A.environment]
    )
    body = {
        "sql": "SELECT count(*) AS n FROM calls",
        "parameters": [],
        "catalog_version": "v1",
        "budget": BUDGET,
    }
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
