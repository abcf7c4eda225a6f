"""Records shared by the metastore, identity and the control-plane service.

These are plain values: the metastore stores and returns them, identity mints tokens from them,
and the service checks scope against them. Scope itself is
:class:`baml_studio.gateway.config.Scope`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class TokenKind(enum.Enum):
    USER = "user"
    """Studio, the CLI or an agent: one tenant and project, a set of environments, optional
    erasure permission."""

    PUBLISHER = "publisher"
    """The profiler's publisher: one environment; presented to the data-plane gateway."""

    WORKLOAD = "workload"
    """A data-plane deployment (gateway, projector, coordinator) in one cell, for one tenant;
    short-lived; presented to the control plane's workload API."""


class DeploymentKind(enum.Enum):
    BYOC = "byoc"
    """In the customer's cloud; assigned to exactly one tenant."""

    ALIEN = "alien"
    """A Boundary-hosted cell; may serve several tenants, each through its own workload token."""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What the metastore keeps of one issued token: never the token itself, only its hash."""

    token_id: str
    """The JWT ``jti``: ``tok_`` and 26 random characters."""

    kind: TokenKind
    tenant_id: str
    token_hash: str
    """SHA-256 of the whole token text, 64 lowercase hex digits."""

    issued_at: int
    """Unix seconds."""

    expires_at: int
    """Unix seconds."""

    project_id: str | None = None
    """User and publisher tokens."""

    environments: tuple[str, ...] = ()
    """User tokens: the allowed environments; publisher tokens: exactly one."""

    erasure: bool = False
    """User tokens: may call ``POST /v1/erasures``."""

    deployment_id: str | None = None
    """Workload tokens."""

    cell: str | None = None
    """Workload tokens."""

    revoked_at: int | None = None
    """Unix seconds, once revoked."""

    replaces: str | None = None
    """The token id this one rotated out, if it was issued by a rotation."""


@dataclass(frozen=True, slots=True)
class EnvironmentRecord:
    tenant_id: str
    project_id: str
    environment_id: str
    active_generation: str
    """``gen_<n>``; ``gen_1`` when the environment is created."""

    created_at: int


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    deployment_id: str
    kind: DeploymentKind
    cell: str
    tenant_id: str | None
    """The owning tenant of a BYOC deployment; ``None`` for an Alien cell deployment."""

    created_at: int


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    tenant_id: str
    project_id: str
    environment_id: str
    generation: str
    created_at: int
    active: bool
