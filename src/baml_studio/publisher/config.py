"""The gateway's ``PublisherConfig`` and the publisher's local settings, both frozen.

``PublisherConfig`` is parsed from ``GET /v1/publisher/config`` (openapi.yaml, ``PublisherConfig``)
and replaced every :attr:`PublisherSettings.config_refresh_seconds`; ``PublisherSettings`` is
read once at the entry point (CLI or the embedding application).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from baml_studio.httpclient import check_base_url
from baml_studio.publisher.errors import GatewayProtocolError

DEFAULT_ZSTD_LEVEL = 3
"""zstd level for every object: level 3 is zstd's default, about 5x faster than level 9 on
segment bytes for a few percent of size (benchmarks/publisher.py measures the limit at it)."""


@dataclass(frozen=True, slots=True)
class PublisherConfig:
    """Limits and switches the gateway serves; field meanings are openapi.yaml's."""

    capture_enabled: bool
    """False: ship nothing, keep files."""
    supported_segment_versions: tuple[int, ...]
    """Segment header versions the projector accepts (frozen value 2)."""
    supported_cas_versions: tuple[int, ...]
    """CAS frame versions the projector accepts (frozen value 1)."""
    flush_interval_seconds: int
    """Seconds between flushes."""
    max_objects_per_authorize: int
    """Most objects in one authorize request."""
    large_value_threshold_bytes: int
    """Values at or above this many body bytes ship as their own CAS object."""
    max_object_bytes: int
    """Largest compressed object the gateway authorizes."""
    pack_max_entry_bytes: int
    """Largest total of original value-file bytes in one pack."""
    shipped_value_retention_seconds: int
    """How long a shipped value or table file stays locally with its marker."""
    upload_url_ttl_seconds: int
    """Lifetime of a presigned PUT URL."""

    @classmethod
    def from_json(cls, body: Any) -> PublisherConfig:
        """Validate a decoded response body; raises GatewayProtocolError naming the bad field."""
        if not isinstance(body, dict):
            raise GatewayProtocolError(f"publisher config must be an object, got {body!r:.80}")
        names = {f.name for f in fields(cls)}
        missing = sorted(names - body.keys())
        if missing:
            raise GatewayProtocolError(f"publisher config lacks {missing}")
        values: dict[str, Any] = {}
        for name in names:
            value = body[name]
            if name == "capture_enabled":
                if not isinstance(value, bool):
                    raise GatewayProtocolError(f"capture_enabled must be a boolean, got {value!r}")
            elif name.startswith("supported_"):
                if not (isinstance(value, list) and value and all(_is_int(v, 1) for v in value)):
                    raise GatewayProtocolError(f"{name} must be a non-empty list of ints >= 1")
                value = tuple(value)
            else:
                minimum = 0 if name == "shipped_value_retention_seconds" else 1
                if not _is_int(value, minimum):
                    raise GatewayProtocolError(f"{name} must be an int >= {minimum}, got {value!r}")
            values[name] = value
        return cls(**values)


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """Local settings of one publisher."""

    store_root: Path
    """The ``profiles-v1`` directory to ship."""
    gateway_url: str
    """Base URL of the data-plane gateway, e.g. ``http://127.0.0.1:8080``."""
    zstd_level: int = DEFAULT_ZSTD_LEVEL
    """zstd level for every shipped object."""
    config_refresh_seconds: float = 300.0
    """Re-read ``GET /v1/publisher/config`` this often (the contract says five minutes)."""
    auth_retry_seconds: float = 30.0
    """After a 401/403, retry the config call this often until a token works."""
    request_timeout_seconds: float = 30.0
    """Timeout of one HTTP request (connect and each read)."""
    put_attempts: int = 3
    """Attempts per object PUT within one flush before the flush gives up (it is retried)."""
    backoff_base_seconds: float = 0.5
    """First backoff step; doubles per failure up to ``backoff_max_seconds``, full jitter."""
    backoff_max_seconds: float = 60.0
    """Largest backoff between failed flushes."""
    retry_after_max_seconds: float = 60.0
    """Longest wait a gateway's ``Retry-After`` can impose after a 429/503; a longer one is cut
    to this, so a gateway answering ``Retry-After: 999999999999`` cannot stall shipping."""
    release_shipped_segments: bool = False
    """Delete segments as soon as their plane cursor passes them. Off by default: local queries
    read them; retention removes them under disk pressure instead."""
    corrupt_block_seconds: float = 60.0
    """A plane whose next file fails its checksum blocks this long, then the file is skipped."""
    disk_budget_bytes: int | None = None
    """Retention target: above it, shipped files are removed, oldest first."""

    def __post_init__(self) -> None:
        """``ValueError`` naming the first field that no publisher can run with, its value
        and what it may be."""
        check_base_url(self.gateway_url, "gateway", "http(s)://host[:port]")
        if not _is_int(self.zstd_level, MIN_ZSTD_LEVEL) or self.zstd_level > MAX_ZSTD_LEVEL:
            raise ValueError(
                f"zstd_level must be a whole number from {MIN_ZSTD_LEVEL} to {MAX_ZSTD_LEVEL} "
                f"(zstd's levels; {DEFAULT_ZSTD_LEVEL} is the default), not {self.zstd_level!r}"
            )
        for name in _POSITIVE_SECONDS:
            _check_seconds(name, getattr(self, name), positive=True)
        _check_seconds("corrupt_block_seconds", self.corrupt_block_seconds, positive=False)
        if self.backoff_max_seconds < self.backoff_base_seconds:
            raise ValueError(
                f"backoff_max_seconds ({self.backoff_max_seconds!r}) must be at least "
                f"backoff_base_seconds ({self.backoff_base_seconds!r})"
            )
        if not _is_int(self.put_attempts, 1):
            raise ValueError(f"put_attempts must be a whole number >= 1, not {self.put_attempts!r}")
        if self.disk_budget_bytes is not None and not _is_int(self.disk_budget_bytes, 0):
            raise ValueError(
                f"disk_budget_bytes must be None (no retention target) or a whole number of "
                f"bytes >= 0, not {self.disk_budget_bytes!r}"
            )
        if not isinstance(self.release_shipped_segments, bool):
            raise ValueError(
                f"release_shipped_segments must be True or False, not "
                f"{self.release_shipped_segments!r}"
            )


MIN_ZSTD_LEVEL = -(1 << 17)
"""zstd's fastest level (``ZSTD_minCLevel``)."""
MAX_ZSTD_LEVEL = 22
"""zstd's strongest level (``ZSTD_maxCLevel``)."""
_POSITIVE_SECONDS = (
    "config_refresh_seconds",
    "auth_retry_seconds",
    "request_timeout_seconds",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "retry_after_max_seconds",
)


def _check_seconds(name: str, value: object, *, positive: bool) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    )
    if not ok:
        bound = "more than 0" if positive else "0 or more"
        raise ValueError(f"{name} must be a finite number of seconds, {bound}, not {value!r}")
