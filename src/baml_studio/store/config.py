"""Configuration of the local store: where it lives and how much disk it may use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROFILE_DIR_ENV = "BAML_PROFILE_DIR"
"""Environment variable that overrides the store root (reference facts §1)."""

STORE_DIR_NAME = "profiles-v1"
BAML_DIR_NAME = ".baml"


@dataclass(frozen=True, slots=True)
class DiskBudget:
    """Admission limits checked under ``publish.lock`` before every publication.

    A file of ``n`` bytes is rejected if ``usage + n + 48 > max_project_bytes`` or
    ``free - (n + 48) < minimum_free_bytes``; the first rejection latches the admission gate.
    """

    max_project_bytes: int
    """Upper bound on the usage ledger (every regular file under the root, plus 48)."""

    minimum_free_bytes: int = 0
    """Free bytes (``statvfs`` ``f_bavail × f_frsize``) that must remain after the write."""

    def __post_init__(self) -> None:
        if self.max_project_bytes < 0 or self.minimum_free_bytes < 0:
            raise ValueError(
                f"DiskBudget limits must be non-negative, got max_project_bytes="
                f"{self.max_project_bytes}, minimum_free_bytes={self.minimum_free_bytes}"
            )


def default_store_root(project_dir: Path) -> Path:
    """``<project>/.baml/profiles-v1``."""
    return project_dir / BAML_DIR_NAME / STORE_DIR_NAME


def resolve_store_root(project_dir: Path, env: Mapping[str, str]) -> Path:
    """The one resolver shared by the profiler and every reader.

    ``BAML_PROFILE_DIR`` wins when set and non-empty; a relative value is taken relative to
    ``project_dir`` (not the process's working directory). Otherwise the root is
    ``<project_dir>/.baml/profiles-v1``.
    """
    override = env.get(PROFILE_DIR_ENV, "")
    if override:
        path = Path(override).expanduser()
        return path if path.is_absolute() else project_dir / path
    return default_store_root(project_dir)
