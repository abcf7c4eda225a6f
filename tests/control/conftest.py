"""Fixtures of the control-plane tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from control_rig import Rig, build


@pytest.fixture
def rig(tmp_path: Path, chdb_dsn: str, fact_database: str) -> Iterator[Rig]:
    yield from build(tmp_path, chdb_dsn, fact_database)
