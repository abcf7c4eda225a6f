"""A profiler process SIGKILLed mid-execution: three ended roots and one without RootEnded
(the sweep's and the scheduled maintenance's tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from baml_studio.catalog import LocalStoreSource
from stuck_profiler import stuck_profiler


@pytest.fixture
def killed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three ended roots and one (``sweep.Stuck``) whose process was SIGKILLed after a flush:
    RootStarted and data shipped, no RootEnded. Built per test (a second or two), so its
    records are always seconds old: fresh for a one-hour silence limit."""
    base = tmp_path_factory.mktemp("sweep-killed")
    root = base / ".baml" / "profiles-v1"
    with stuck_profiler(root, "sweep"):
        pass
    return root


def abandoned_ids(root: Path) -> list[str]:
    threads = LocalStoreSource(root).root_threads(columns=["execution_id", "status"])
    return sorted(
        e
        for e, s in zip(
            threads["execution_id"].to_pylist(), threads["status"].to_pylist(), strict=True
        )
        if s == "abandoned"
    )
