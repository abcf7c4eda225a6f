"""ministack (S3 + SQS) as a test peer, shared by every test package (DESIGN.md §4).

``start_ministack(tmp_path) -> (endpoint, stop)`` runs the pip-installed ``ministack==1.5.33`` as
a subprocess on a free 127.0.0.1 port with its pid, log and data files under ``tmp_path``, and
waits (bounded) until its health endpoint answers. The session fixture ``ministack_endpoint``
(registered in ``tests/conftest.py``) starts one per test session and stops it at the end.

Facts the suites rely on (observed with 1.5.33): it verifies SigV4 *presigned* URLs against the
secret ``test`` (signature, expiry, every signed header), enforces ``If-None-Match: *`` (412) and
``x-amz-checksum-sha256`` (400 ``BadDigest``), and keeps versions; it does not check
header-signed requests, and a SigV2 presigned URL signs neither header.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
REGION = "us-east-1"
ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
CREDENTIALS = {"aws_access_key_id": ACCESS_KEY_ID, "aws_secret_access_key": SECRET_ACCESS_KEY}


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/_ministack/health", timeout=0.5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_ministack(tmp_path: Path) -> tuple[str, Callable[[], None]]:
    """Start ministack; return its endpoint URL and an idempotent ``stop``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        BIND_HOST="127.0.0.1",
        GATEWAY_PORT=str(port),
        SERVICES="s3,sqs",
        TMPDIR=str(tmp_path),
        S3_DATA_DIR=str(tmp_path / "s3"),
        S3_PERSIST="0",
        LOG_LEVEL="WARNING",
    )
    log_path = tmp_path / f"ministack-{port}.out"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ministack"],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        log.close()

    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _healthy(endpoint):
        if proc.poll() is not None:
            stop()
            output = log_path.read_text(errors="replace")
            raise RuntimeError(f"ministack exited with {proc.returncode}:\n{output}")
        if time.monotonic() > deadline:
            stop()
            raise RuntimeError(f"ministack was not healthy on {endpoint} within {READY_TIMEOUT_S}s")
        time.sleep(0.05)  # readiness poll of a child process, bounded by the deadline
    return endpoint, stop


def lance_options(endpoint: str) -> dict[str, str]:
    """Lance's (object_store's) ``storage_options`` for ministack with the test credentials."""
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
        "aws_region": REGION,
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
    }


def client(service: str, endpoint: str, **config: Any) -> Any:
    """A boto3 client for ministack with the test credentials, SigV4 and few retries."""
    import boto3  # type: ignore[import-untyped]  # reason: boto3 ships no types
    from botocore.config import Config  # type: ignore[import-untyped]  # reason: as above

    options: dict[str, Any] = {"retries": {"mode": "standard", "max_attempts": 2}}
    if service == "s3":
        options.update(signature_version="s3v4", s3={"addressing_style": "path"})
    options.update(config)
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, config=Config(**options), **CREDENTIALS
    )


@pytest.fixture(scope="session")
def ministack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Endpoint of one ministack (S3 + SQS) shared by the whole test session."""
    endpoint, stop = start_ministack(tmp_path_factory.mktemp("ministack"))
    try:
        yield endpoint
    finally:
        stop()
