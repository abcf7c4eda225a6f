"""Configuration of the control plane, read once at the entry point.

``baml-studio serve control --data DIR`` uses the embedded defaults under ``DIR``::

    control.json            optional: {"metastore_url", "facts_dsn", "facts_database",
                            "snapshot_ttl_s", "max_concurrent_queries", "resident_caps": {...},
                            "batch_limits": {...}}
    metastore.db            SQLite metastore (default ``metastore_url``)
    chdb/                   embedded ClickHouse (default ``facts_dsn`` = ``chdb://DIR/chdb``)
    control-keys.json       the Ed25519 signing key ring (0600), created on first start

A PostgreSQL or MySQL metastore and a ClickHouse server are chosen by URL alone
(``postgresql+psycopg://…``, ``mysql+pymysql://…``, ``https://user:pass@host:8443``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.configfile import construct, read_json_object, settings_of
from baml_studio.control.ingest import BatchLimits
from baml_studio.control.resident import ResidentBudget

DEFAULT_RESIDENT_CAPS = ResidentBudget(
    max_wall_ms=30_000,
    max_rows_read=2_000_000_000,
    max_bytes_read=200 * 1024**3,
    max_result_rows=10_000_000,
    max_result_bytes=2 * 1024**3,
)

_NOT_SET = frozenset({"data_dir"})
"""Fields of :class:`ControlConfig` that ``control.json`` cannot set."""


@dataclass(frozen=True, slots=True)
class ControlConfig:
    data_dir: Path
    """Data directory of the embedded defaults (layout in the module docstring)."""

    metastore_url: str
    """SQLAlchemy URL of the metastore."""

    facts_dsn: str
    """clickhouse-connect DSN of the fact store: ``chdb:///path`` or ``https://…``."""

    facts_database: str = "baml_facts"
    """ClickHouse database holding the fact tables and the batch ledger."""

    snapshot_ttl_s: int = 60
    """Lifetime of a query snapshot."""

    max_concurrent_queries: int = 8
    """Resident queries running at once; more get 429 with Retry-After."""

    resident_caps: ResidentBudget = DEFAULT_RESIDENT_CAPS
    """Upper bounds applied to every resident query's budget."""

    batch_limits: BatchLimits = field(default_factory=BatchLimits)
    """Size limits of projection batch bodies."""

    batch_auth_cache_s: float = 1.0
    """How long ``PUT /projection-batches`` reuses a token's verification and a deployment's
    reach of a scope (0: look both up per batch). A projector sends hundreds of batches a
    second with one token; each lookup costs a metastore read. A revoked token or a withdrawn
    scope keeps reaching projection batches for at most this long. The active generation is
    read per batch: a projector learns of a new generation only from the 409 it gets."""

    def __post_init__(self) -> None:
        problems = [
            f"{name}={value} (must be >= {least})"
            for name, value, least in (
                ("snapshot_ttl_s", self.snapshot_ttl_s, 1),
                ("max_concurrent_queries", self.max_concurrent_queries, 1),
                ("batch_auth_cache_s", self.batch_auth_cache_s, 0),
                *((f"resident_caps.{k}", v, 1) for k, v in asdict(self.resident_caps).items()),
                *((f"batch_limits.{k}", v, 1) for k, v in asdict(self.batch_limits).items()),
            )
            if not value >= least
        ]
        if problems:
            raise ValueError("invalid ControlConfig: " + ", ".join(problems))

    @property
    def keys_path(self) -> Path:
        return self.data_dir / "control-keys.json"

    @classmethod
    def from_data_dir(cls, data_dir: Path, **overrides: Any) -> ControlConfig:
        """Defaults under ``data_dir``, then ``control.json``, then ``overrides`` (``None``
        ones skipped). A ``control.json`` that is not JSON, holds an unknown setting or a
        value of the wrong type or range raises :class:`~baml_studio.configfile.ConfigError`
        (a ``ValueError``) naming the setting; an unreadable one raises ``OSError``."""
        data_dir = data_dir.resolve()
        settings: dict[str, Any] = {
            "metastore_url": f"sqlite:///{data_dir / 'metastore.db'}",
            "facts_dsn": f"chdb://{data_dir / 'chdb'}",
        }
        path = data_dir / "control.json"
        if path.exists():
            settings.update(settings_of(cls, read_json_object(path), str(path), exclude=_NOT_SET))
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return construct(cls, {"data_dir": data_dir, **settings}, str(path))
