from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from objectstore_harness import (
    StoreHarness,
    SwitchableApp,
    bound_socket,
    directory_harness,
    s3_harness,
    serve_asgi,
)

from ministack_fixture import client


@pytest.fixture(scope="session")
def ministack_s3(ministack_endpoint: str) -> Any:
    """One boto3 S3 client (SigV4, path style) for the session's ministack."""
    return client("s3", ministack_endpoint)


@pytest.fixture(scope="session")
def presign_server() -> Iterator[tuple[str, SwitchableApp]]:
    """One uvicorn on 127.0.0.1 for the session; each test installs its bucket's app."""
    sock = bound_socket()
    switch = SwitchableApp()
    with serve_asgi(switch, sock):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", switch


@pytest.fixture(params=["directory", "s3"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreHarness]:
    """Each adapter in turn: a directory bucket (with its HTTP app) and S3 on ministack."""
    if request.param == "directory":
        base_url, switch = request.getfixturevalue("presign_server")
        with directory_harness(tmp_path, base_url, switch) as built:
            yield built
    else:
        endpoint = request.getfixturevalue("ministack_endpoint")
        raw = request.getfixturevalue("ministack_s3")
        yield s3_harness(endpoint, f"os-{uuid.uuid4().hex[:24]}", raw)


@pytest.fixture
def dir_harness(
    tmp_path: Path, presign_server: tuple[str, SwitchableApp]
) -> Iterator[StoreHarness]:
    with directory_harness(tmp_path, *presign_server) as built:
        yield built
