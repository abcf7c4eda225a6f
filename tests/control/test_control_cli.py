"""``baml-studio serve control`` end to end: its own process (its own chDB path under DATA),
provisioned with ``baml-studio admin``, answering over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from control_rig import batch, ipc_bytes, read_ipc, sha256, zstd

CLI = [sys.executable, "-m", "baml_studio.cli"]


def _admin(data: Path, *args: str) -> dict:
    done = subprocess.run(
        [*CLI, "admin", *args, "--data", str(data)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    data = tmp_path / "control"
    _admin(data, "tenants", "create", "tn_a")
    _admin(data, "projects", "create", "tn_a", "prj")
    _admin(data, "environments", "create", "tn_a", "prj", "prod")
    _admin(
        data, "deployments", "create", "dep_a", "--kind", "byoc", "--cell", "c1", "--tenant", "tn_a"
    )
    _admin(data, "deployments", "assign", "dep_a", "tn_a", "prj", "prod")
    token = _admin(
        data,
        "tokens",
        "issue",
        "workload",
        "--tenant",
        "tn_a",
        "--deployment",
        "dep_a",
        "--cell",
        "c1",
    )["token"]
    port = _free_port()
    process = subprocess.Popen(
        [*CLI, "serve", "control", "--data", str(data), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"serve control did not start: {process.stderr.read()!r}")
        time.sleep(0.1)
    try:
        yield url, token
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_served_control_plane_ingests_and_queries(served: tuple[str, str]) -> None:
    url, token = served

    def headers(**extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "X-Baml-Request-Id": uuid.uuid4().hex, **extra}

    raw = ipc_bytes(batch("calls_v1", "exec_cli", 5))
    put = httpx.put(
        f"{url}/projection-batches/exec_cli.calls_v1.0",
        content=zstd(raw),
        headers=headers(
            **{
                "Content-Encoding": "zstd",
                "X-Baml-Root-Id": "exec_cli",
                "X-Baml-Project-Id": "prj",
                "X-Baml-Environment-Id": "prod",
                "X-Baml-Relation": "calls_v1",
                "X-Baml-Partition": "0",
                "X-Baml-Projection-Generation": "gen_1",
                "X-Baml-Content-Digest": sha256(raw),
            }
        ),
    )
    assert put.status_code == 201, put.text
    snap = httpx.post(
        f"{url}/studio-data/v1/query-snapshots",
        json={
            "scope": {"tenant_id": "tn_a", "project_id": "prj", "environment_id": "prod"},
            "catalog_version": "v1",
        },
        headers=headers(),
    )
    assert snap.status_code == 200, snap.text
    answer = httpx.post(
        f"{url}/resident-queries",
        json={
            "snapshot_id": snap.json()["snapshot_id"],
            "sql": "SELECT count(*) AS n FROM calls WHERE execution_id = $1",
            "parameters": [{"type": "string", "value": "exec_cli"}],
            "budget": {
                "max_wall_ms": 5000,
                "max_rows_read": 10**6,
                "max_bytes_read": 10**9,
                "max_result_rows": 10,
                "max_result_bytes": 10**6,
            },
        },
        headers=headers(),
    )
    assert answer.status_code == 200, answer.text
    assert read_ipc(answer.content).column("n").to_pylist() == [5]
    jwks = httpx.get(f"{url}/.well-known/jwks.json").json()
    assert jwks["keys"][0]["kty"] == "OKP"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--facts", "garbage"], "fact store dsn 'garbage'"),
        (["--tls-cert", "nofile.pem", "--tls-key", "nofile.pem"], "does not exist"),
    ],
)
def test_serve_control_settings_it_cannot_use_are_usage_errors(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """Exit 2 with the reason (they were ValueError / TlsConfigError tracebacks, exit 1)."""
    done = subprocess.run(
        [*CLI, "serve", "control", "--data", str(tmp_path / "c"), "--port", str(_free_port()),
         *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
