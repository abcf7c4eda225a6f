"""Query snapshots: stateless, signed bindings of scope, catalog version and generation.

``POST /query-snapshots`` answers a ``snapshot_id`` that is ``snap_`` followed by a JWT signed by
the control plane's active key (claims ``kind="snapshot"``, ``tenant``, ``project``,
``environment``, ``catalog_version``, ``generation``, ``exp``, ``kid``). Any replica that holds the
key ring can resolve it, and a restart loses nothing. A snapshot keeps naming its generation after
a bump, until it expires; a resident query under it reads that generation.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt

from baml_studio.apierrors import BadRequest
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRing

PREFIX = "snap_"
KIND = "snapshot"
MAX_EXPIRES_AT = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())
"""The last ``exp`` a snapshot can carry (the end of year 9999, as ``datetime`` allows)."""


class InvalidSnapshot(BadRequest):
    code = "invalid_snapshot"


class SnapshotExpired(BadRequest):
    code = "snapshot_expired"


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: str
    scope: Scope
    catalog_version: str
    generation: str
    expires_at: int
    """Unix seconds."""

    def as_json(self) -> dict[str, Any]:
        """The ``QuerySnapshot`` JSON."""
        return {
            "snapshot_id": self.snapshot_id,
            "scope": {
                "tenant_id": self.scope.tenant,
                "project_id": self.scope.project,
                "environment_id": self.scope.environment,
            },
            "catalog_version": self.catalog_version,
            "generation": self.generation,
            "expires_at": datetime.fromtimestamp(self.expires_at, UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }


def issue(
    ring: KeyRing,
    scope: Scope,
    catalog_version: str,
    generation: str,
    ttl_s: int,
    *,
    now: float | None = None,
) -> Snapshot:
    """A snapshot signed by ``ring``'s active key, valid ``ttl_s`` seconds."""
    expires_at = int(time.time() if now is None else now) + ttl_s
    key = ring.active_key
    claims = {
        **scope.as_dict(),
        "kind": KIND,
        "catalog_version": catalog_version,
        "generation": generation,
        "exp": expires_at,
        "kid": key.kid,
        "nonce": secrets.token_hex(6),
    }
    token = jwt.encode(claims, key.signing_material(), algorithm=key.alg, headers={"kid": key.kid})
    return Snapshot(PREFIX + token, scope, catalog_version, generation, expires_at)


def resolve(ring: KeyRing, snapshot_id: str, *, now: float | None = None) -> Snapshot:
    """The snapshot ``snapshot_id`` names; ``InvalidSnapshot`` or ``SnapshotExpired`` (400)."""
    if not snapshot_id.startswith(PREFIX):
        raise InvalidSnapshot("snapshot_id was not issued by POST /query-snapshots")
    token = snapshot_id[len(PREFIX) :]
    try:
        kid = jwt.get_unverified_header(token).get("kid")
        key = ring.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise InvalidSnapshot("snapshot_id is signed by an unknown key; create a new one")
        claims: dict[str, Any] = jwt.decode(
            token,
            key.verifying_material(),
            algorithms=[key.alg],
            options={"verify_exp": False, "require": ["exp", "kind", "generation"]},
        )
        scope = Scope(claims["tenant"], claims["project"], claims["environment"])
        snapshot = Snapshot(
            snapshot_id,
            scope,
            _text_claim(claims, "catalog_version"),
            _text_claim(claims, "generation"),
            _exp_claim(claims),
        )
    except (jwt.PyJWTError, KeyError, TypeError, ValueError) as exc:
        raise InvalidSnapshot(f"snapshot_id is not a valid snapshot: {exc}") from exc
    if claims.get("kind") != KIND:
        raise InvalidSnapshot("snapshot_id is not a snapshot")
    if snapshot.expires_at <= (time.time() if now is None else now):
        raise SnapshotExpired(
            "the snapshot has expired; create a new one with POST /query-snapshots",
            details={"expires_at": snapshot.as_json()["expires_at"]},
        )
    return snapshot


def _text_claim(claims: dict[str, Any], name: str) -> str:
    value = claims[name]
    if not isinstance(value, str):
        raise ValueError(f"claim {name} is {type(value).__name__}, not a string")
    return value


def _exp_claim(claims: dict[str, Any]) -> int:
    """``exp``: whole Unix seconds that ``Snapshot.as_json`` can render (years 1970 to 9999)."""
    exp = claims["exp"]
    if isinstance(exp, bool) or not isinstance(exp, int) or not 0 <= exp <= MAX_EXPIRES_AT:
        raise ValueError(f"claim exp must be whole seconds in 0..{MAX_EXPIRES_AT}")
    return exp
