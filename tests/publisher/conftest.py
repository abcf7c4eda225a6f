from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from publisher_env import TOKEN, FakeEnv
from publisher_fake_gateway import FakeGateway, free_port, make_bucket, serve_fake
from publisher_real_gateway import FAMILIES

from baml_studio.workload import run_workload


@pytest.fixture
def fake_env(tmp_path: Path) -> Iterator[FakeEnv]:
    port = free_port()
    gateway = FakeGateway(make_bucket(tmp_path / "bucket", port), {TOKEN})
    with serve_fake(gateway, port) as url:
        yield FakeEnv(gateway, url, port)


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """Each adapter family in turn: (family, ministack endpoint or None)."""
    endpoint = request.getfixturevalue("ministack_endpoint") if request.param == "s3" else None
    return request.param, endpoint


@pytest.fixture(scope="session")
def demo_store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo") / "profiles-v1"
    run_workload(root, executions=24, processes=2, seed=11)
    return root


@pytest.fixture
def demo_store(tmp_path: Path, demo_store_template: Path) -> Path:
    import shutil

    target = tmp_path / "store" / "profiles-v1"
    shutil.copytree(demo_store_template, target)
    return target
