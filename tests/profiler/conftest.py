from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from baml_studio.profiler import Profiler, ProfilerConfig


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / ".baml" / "profiles-v1"


@pytest.fixture
def profiler(store_root: Path) -> Iterator[Profiler]:
    prof = Profiler(ProfilerConfig(store_root=store_root, publish_interval_s=None)).activate()
    yield prof
    prof.close()
