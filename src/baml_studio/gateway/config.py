"""Configuration of the gateway, read once at the entry point.

:class:`Scope` is one tenant, project and environment (what a publisher token binds).
:class:`PublisherLimits` is the ``PublisherConfig`` the gateway serves and enforces, with the
contract's starting values as defaults. :class:`GatewayConfig` adds the HTTP limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from baml_studio.configfile import build

SCOPE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""A tenant, project or environment id: one safe object-key segment (1–128 characters)."""

MIB = 1 << 20


def validate_scope_part(name: str, value: object) -> str:
    """Return ``value`` if it can be a scope id, else raise ``ValueError`` naming the rule."""
    if not isinstance(value, str) or not SCOPE_PART.fullmatch(value):
        raise ValueError(
            f"{name} {value!r} is not a valid id: use 1-128 characters of A-Z a-z 0-9 _ . -, "
            "starting with a letter, digit or '_' (e.g. 'env_prod')"
        )
    return value


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """One environment of one project of one tenant: the root of its evidence prefix."""

    tenant: str
    """Tenant id (``tenant_id``), the root authorization boundary."""

    project: str
    """Project id within the tenant."""

    environment: str
    """Environment id within the project."""

    def __post_init__(self) -> None:
        validate_scope_part("tenant", self.tenant)
        validate_scope_part("project", self.project)
        validate_scope_part("environment", self.environment)

    def as_dict(self) -> dict[str, str]:
        return {"tenant": self.tenant, "project": self.project, "environment": self.environment}

    @classmethod
    def from_dict(cls, raw: Any) -> Scope:
        """From ``{"tenant", "project", "environment"}``; ``ValueError`` on anything else."""
        if not isinstance(raw, dict) or set(raw) != {"tenant", "project", "environment"}:
            raise ValueError(f"a scope is {{tenant, project, environment}}, got {raw!r}")
        return cls(raw["tenant"], raw["project"], raw["environment"])


@dataclass(frozen=True, slots=True)
class PublisherLimits:
    """The ``PublisherConfig`` served by ``GET /v1/publisher/config`` (openapi.yaml)."""

    capture_enabled: bool = True
    """When false the publisher ships nothing and keeps its files."""

    supported_segment_versions: tuple[int, ...] = (2,)
    """Segment header versions the projector accepts."""

    supported_cas_versions: tuple[int, ...] = (1,)
    """CAS frame versions the projector accepts."""

    flush_interval_seconds: int = 5
    """Seconds between publisher flushes."""

    max_objects_per_authorize: int = 100
    """Most objects in one authorize request; more is 413."""

    large_value_threshold_bytes: int = 32 * 1024
    """Values at or above this size ship as their own CAS object."""

    max_object_bytes: int = 256 * MIB
    """Largest compressed object the gateway authorizes; larger is 413."""

    pack_max_entry_bytes: int = 8 * MIB
    """Largest total of original value bytes in one value pack."""

    shipped_value_retention_seconds: int = 3600
    """How long the publisher keeps a shipped value or table file."""

    upload_url_ttl_seconds: int = 900
    """Lifetime of a presigned PUT URL."""

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)} (must be >= 1)"
            for name in (
                "flush_interval_seconds",
                "max_objects_per_authorize",
                "large_value_threshold_bytes",
                "max_object_bytes",
                "pack_max_entry_bytes",
                "upload_url_ttl_seconds",
            )
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1
        ]
        if self.shipped_value_retention_seconds < 0:
            problems.append("shipped_value_retention_seconds (must be >= 0)")
        for name in ("supported_segment_versions", "supported_cas_versions"):
            versions = getattr(self, name)
            if not versions or len(set(versions)) != len(versions) or min(versions) < 1:
                problems.append(f"{name}={versions} (non-empty, unique, each >= 1)")
        if not 1 <= self.upload_url_ttl_seconds <= 7 * 24 * 3600:
            problems.append("upload_url_ttl_seconds (1 s to 7 days, as S3 allows)")
        if problems:
            raise ValueError("invalid PublisherLimits: " + ", ".join(problems))

    def as_publisher_config(self, *, capture_enabled: bool | None = None) -> dict[str, Any]:
        """The ``PublisherConfig`` JSON object."""
        enabled = self.capture_enabled if capture_enabled is None else capture_enabled
        return {
            "capture_enabled": enabled,
            "supported_segment_versions": list(self.supported_segment_versions),
            "supported_cas_versions": list(self.supported_cas_versions),
            "flush_interval_seconds": self.flush_interval_seconds,
            "max_objects_per_authorize": self.max_objects_per_authorize,
            "large_value_threshold_bytes": self.large_value_threshold_bytes,
            "max_object_bytes": self.max_object_bytes,
            "pack_max_entry_bytes": self.pack_max_entry_bytes,
            "shipped_value_retention_seconds": self.shipped_value_retention_seconds,
            "upload_url_ttl_seconds": self.upload_url_ttl_seconds,
        }

    @classmethod
    def from_dict(
        cls, raw: object, *, source: str = "publisher limits", at: str = ""
    ) -> PublisherLimits:
        """From a JSON object with any subset of the fields; anything else (unknown fields, a
        value of the wrong type or out of range) raises :class:`~baml_studio.configfile.ConfigError`
        (a ``ValueError``) naming the field, at ``at`` in ``source``."""
        return build(cls, raw, source, at=at)


REMOTE_HEAD_CONCURRENCY = 16
"""Existence checks in flight at once per authorize request when they are network calls."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Limits of the gateway's HTTP surface."""

    limits: PublisherLimits = field(default_factory=PublisherLimits)
    """What the publisher is told and what authorize enforces."""

    max_request_bytes: int = 4 * MIB
    """Largest authorize body read; larger is 413 before parsing."""

    max_concurrent_authorize: int = 64
    """Authorize requests served at once; one more is 429 with ``Retry-After``."""

    head_concurrency: int | None = None
    """Object existence checks in flight at once within one authorize request. None: the
    data plane picks 1 for the directory bucket (a check is a few local system calls, cheaper
    than handing it to a thread) and :data:`REMOTE_HEAD_CONCURRENCY` for S3 (a round trip each)."""

    retry_after_seconds: int = 1
    """``Retry-After`` on 429 and 503."""

    config_max_age_seconds: int = 300
    """``Cache-Control: max-age`` of the publisher configuration."""

    token_leeway_seconds: int = 5
    """Clock skew tolerated on a token's ``exp``."""

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "max_concurrent_authorize", "head_concurrency"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"GatewayConfig.{name} must be >= 1, got {value}")
