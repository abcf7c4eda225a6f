from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_demo import Demo

from baml_studio.workload import run_workload


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("e2e") / ".baml" / "profiles-v1"
    report = run_workload(root, executions=100, processes=2, seed=11)
    yield Demo(root, report)
