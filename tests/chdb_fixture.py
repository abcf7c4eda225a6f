"""The one chDB path of the test process.

chDB lets a process open one database path for its whole life (DESIGN.md §4), so every test in
this process shares ``chdb_dsn`` and isolates itself by database name (``fact_database``).
A test that needs a second path runs a control plane in a subprocess.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def chdb_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("chdb")
    yield f"chdb://{path}"


@pytest.fixture
def fact_database() -> str:
    """A database name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"
