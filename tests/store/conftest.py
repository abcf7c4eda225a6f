from __future__ import annotations

import uuid
from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A store root in a fresh project: ``<tmp>/project/.baml/profiles-v1`` (not yet created)."""
    return tmp_path / "project" / ".baml" / "profiles-v1"


@pytest.fixture
def euid() -> bytes:
    return uuid.uuid4().bytes
