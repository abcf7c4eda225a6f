"""Configuration of the fact store, read once at the entry point.

:class:`FactStoreConfig` names the ClickHouse to use (``dsn``: embedded chDB or a server), the
database, the insert coalescing window and the query caps. :class:`QueryCaps` are upper bounds
the store applies to every read-only query, whatever the caller asks for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlparse

DATABASE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""A ClickHouse database name the store accepts: a plain identifier, never quoted."""

DSN_SCHEMES = ("chdb", "http", "https")


@dataclass(frozen=True, slots=True)
class QueryCaps:
    """Upper bounds on every query of :meth:`FactStore.query_arrow`. A caller's setting is
    lowered to the cap; a missing one (or ``0``, ClickHouse's "unlimited") becomes the cap."""

    max_execution_time: float = 30.0
    """Seconds (``max_execution_time``)."""

    max_rows_to_read: int = 100_000_000
    """Rows read from tables (``max_rows_to_read``)."""

    max_bytes_to_read: int = 20 << 30
    """Bytes read from tables (``max_bytes_to_read``)."""

    max_result_rows: int = 1_000_000
    """Rows in the result (``max_result_rows``)."""

    max_result_bytes: int = 1 << 30
    """Bytes in the result (``max_result_bytes``)."""

    max_memory_usage: int = 4 << 30
    """Bytes of memory for one query (``max_memory_usage``)."""

    def as_settings(self) -> dict[str, int | float]:
        return {
            "max_execution_time": self.max_execution_time,
            "max_rows_to_read": self.max_rows_to_read,
            "max_bytes_to_read": self.max_bytes_to_read,
            "max_result_rows": self.max_result_rows,
            "max_result_bytes": self.max_result_bytes,
            "max_memory_usage": self.max_memory_usage,
        }


@dataclass(frozen=True, slots=True)
class FactStoreConfig:
    """Where the public facts live and how the store writes and reads them."""

    dsn: str
    """``chdb:///abs/path`` (embedded, one path per process) or ``https://user:pass@host:8443``
    / ``http://host:8123`` (a ClickHouse server); both go through ``clickhouse_connect``."""

    database: str = "baml_facts"
    """Database holding the six relation tables and ``projection_batches``."""

    coalesce_linger_ms: float = 5.0
    """How long the first waiting batch waits for others to share its group's statements."""

    coalesce_busy_linger_ms: float = 60.0
    """How long the flusher lingers instead when it finds ``coalesce_busy_batches`` or more
    batches already waiting (sustained load: a projection arrival or a replay). Measured
    through the batch route (``benchmarks/batch_route.py``, tmpfs): 60 ms against 5 ms made
    groups of ~160 batches instead of ~109 and cut the control plane's CPU per new batch from
    2.03 to 1.37–1.56 ms; a lone batch still waits ``coalesce_linger_ms`` only."""

    coalesce_busy_batches: int = 64
    """Batches waiting when the flusher returns from a group at which it counts as busy."""

    coalesce_writers: int = 1
    """Flusher threads writing groups at the same time. One: while it writes a group, the
    next group gathers every batch that arrives meanwhile, so groups stay large (measured on
    2 cores: two writers halved the group size and gained nothing)."""

    coalesce_max_rows: int = 50_000
    """Rows above which a coalesced insert is sent without waiting out the linger."""

    merge_selector_base: float | None = 20.0
    """ClickHouse's ``merge_selector_base`` for the six relation tables (the server's default
    is 5): how many parts of a size a merge waits for. Every group writes one small part per
    relation, and merging them again and again cost more CPU than the inserts: 400 inserts of
    200 ``calls_v1`` rows, ten a second, took 29.4–29.5 ms of CPU each with merges at 5 and
    16.9–17.8 ms at 20 (chDB; a few more active parts: 10 against 6 at the end). ``None``
    leaves the server's default; a server that does not know the setting keeps its own."""

    ledger_cache_entries: int = 100_000
    """Visible ledger entries remembered in memory, so a repeated batch costs no query."""

    connect_timeout_s: float = 10.0
    """Server DSNs only: seconds to open a connection."""

    send_receive_timeout_s: float = 300.0
    """Server DSNs only: seconds to wait on one request (erasures wait for mutations)."""

    query_caps: QueryCaps = field(default_factory=QueryCaps)
    """Upper bounds on every read-only query."""

    def __post_init__(self) -> None:
        scheme = urlparse(self.dsn).scheme
        if scheme not in DSN_SCHEMES:
            raise ValueError(
                f"fact store dsn {self.dsn.split('@')[-1]!r} has scheme {scheme!r}: use "
                "chdb:///abs/path, http://host:8123 or https://user:pass@host:8443"
            )
        if not DATABASE_NAME.fullmatch(self.database):
            raise ValueError(
                f"fact store database {self.database!r} is not a plain identifier: use letters, "
                "digits and '_' (e.g. 'baml_facts')"
            )
        if (
            self.coalesce_linger_ms < 0
            or self.coalesce_busy_linger_ms < 0
            or self.coalesce_busy_batches < 1
            or self.coalesce_max_rows < 1
            or self.coalesce_writers < 1
        ):
            raise ValueError(
                f"coalesce_linger_ms={self.coalesce_linger_ms} and coalesce_busy_linger_ms="
                f"{self.coalesce_busy_linger_ms} must be >= 0, coalesce_busy_batches="
                f"{self.coalesce_busy_batches}, coalesce_max_rows={self.coalesce_max_rows} and "
                f"coalesce_writers={self.coalesce_writers} >= 1"
            )
        if self.merge_selector_base is not None and not self.merge_selector_base > 1:
            raise ValueError(
                f"merge_selector_base={self.merge_selector_base} must be > 1 (or None: the "
                "server's default)"
            )
        if self.ledger_cache_entries < 0:
            raise ValueError(f"ledger_cache_entries={self.ledger_cache_entries} must be >= 0")

    @property
    def embedded(self) -> bool:
        """Whether the DSN names an embedded chDB path."""
        return urlparse(self.dsn).scheme == "chdb"
