"""Configuration of the query coordinator, read once where it is opened."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    max_interactive_candidates: int = 2_000_000
    """Public rows an interactive private or mixed query may pull from the control plane to
    evaluate its private part; a larger estimate gets ``query_too_costly`` (use a job)."""

    max_background_candidates: int = 50_000_000
    """The same bound for background jobs (a guard against unbounded memory)."""

    max_wall_ms: int = 300_000
    """Longest wall budget of an interactive query; a larger ``budget.max_wall_ms`` is capped
    to it. The versions a query binds are leased from compaction for its wall budget."""

    max_background_wall_ms: int = 6 * 3600 * 1000
    """The same cap for background jobs."""

    resident_timeout_ms: int = 60_000
    """Wall budget of one resident subquery (also capped by the query's own budget)."""

    cache_dir: Path | None = None
    """The read cache's directory (local disk); None: no cache."""

    cache_bytes: int = 1 << 30
    """Largest size of the read cache."""

    decoded_values: int = 100_000
    """Decoded values kept in memory across queries (0: none; each query decodes its own)."""

    studio_origins: tuple[str, ...] = ()
    """Browser origins allowed by CORS (Studio)."""

    job_workers: int = 2
    """Background jobs run at once."""

    job_ttl_s: float = 24 * 3600.0
    """How long a job record and its result are kept."""

    def __post_init__(self) -> None:
        if self.decoded_values < 0:
            raise ValueError("CoordinatorConfig.decoded_values must be at least 0")
        names = (
            "max_interactive_candidates", "max_background_candidates", "cache_bytes",
            "max_wall_ms", "max_background_wall_ms",
        )  # fmt: skip
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"CoordinatorConfig.{name} must be at least 1")
