from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_rig import GatewayRig, directory_rig, s3_rig

from ministack_fixture import client


@pytest.fixture(scope="session")
def gateway_s3_client(ministack_endpoint: str) -> Any:
    return client("s3", ministack_endpoint)


@pytest.fixture(params=["directory", "s3"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GatewayRig]:
    """The gateway over each adapter family in turn."""
    if request.param == "directory":
        with directory_rig(tmp_path) as built:
            yield built
    else:
        endpoint = request.getfixturevalue("ministack_endpoint")
        raw = request.getfixturevalue("gateway_s3_client")
        with s3_rig(tmp_path, endpoint, f"gw-{uuid.uuid4().hex[:24]}", raw) as built:
            yield built


@pytest.fixture
def dir_rig(tmp_path: Path) -> Iterator[GatewayRig]:
    with directory_rig(tmp_path) as built:
        yield built
