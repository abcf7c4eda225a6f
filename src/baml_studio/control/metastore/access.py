"""Who may act where: deployments, the environments assigned to them, and the token registry.

A BYOC deployment belongs to one tenant and serves only that tenant's environments; an Alien
cell deployment belongs to none and may serve environments of several tenants. The registry
keeps each issued token's record with the SHA-256 of its text, never the text.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any, Literal

from sqlalchemy import Connection, Row, delete, select, update

from baml_studio.control.metastore import tables as t
from baml_studio.control.metastore.base import (
    StoreBase,
    record_values,
    scope_text,
    scope_values,
    valid_id,
    where_scope,
)
from baml_studio.control.metastore.errors import (
    InvalidArgument,
    MetastoreConflict,
    MetastoreError,
    NotFoundInMetastore,
)
from baml_studio.control.model import DeploymentKind, DeploymentRecord, TokenKind, TokenRecord
from baml_studio.gateway.config import Scope

TokenState = Literal["active", "revoked", "unknown"]
_TOKEN_HASH = re.compile(r"[0-9a-f]{64}")


class AccessStore(StoreBase):
    """Deployments, their environments, and issued tokens."""

    # -- deployments -------------------------------------------------------------------------

    def create_deployment(
        self, deployment_id: str, kind: DeploymentKind, cell: str, tenant_id: str | None = None
    ) -> DeploymentRecord:
        """A BYOC deployment needs its owning ``tenant_id``; an Alien one takes none."""
        valid_id("deployment", deployment_id)
        valid_id("cell", cell)
        if not isinstance(kind, DeploymentKind):
            raise InvalidArgument(f"deployment kind {kind!r} is not one of byoc, alien")
        if kind is DeploymentKind.BYOC and tenant_id is None:
            raise InvalidArgument("a BYOC deployment belongs to one tenant: give its tenant id")
        if kind is DeploymentKind.ALIEN and tenant_id is not None:
            raise InvalidArgument(
                "an Alien cell deployment belongs to no tenant (it may serve several): "
                "give no tenant id"
            )
        record = DeploymentRecord(deployment_id, kind, cell, tenant_id, self.now())
        with self.write() as c:
            if tenant_id is not None:
                self.require_tenant(c, valid_id("tenant", tenant_id))
            values = {**record_values(record), "kind": kind.value}
            self.insert_new(c, t.deployments, values, f"deployment {deployment_id!r}")
        return record

    def get_deployment(self, deployment_id: str) -> DeploymentRecord | None:
        d = t.deployments
        query = select(d).where(d.c.deployment_id == valid_id("deployment", deployment_id))
        with self.read() as c:
            row = c.execute(query).first()
        return None if row is None else _deployment(row)

    def assign_environment(self, deployment_id: str, scope: Scope) -> None:
        """Let the deployment serve ``scope``; a BYOC deployment only its own tenant's."""
        with self.write() as c:
            deployment = _deployment(self._require_deployment(c, deployment_id))
            self.require_environment(c, scope)
            if deployment.kind is DeploymentKind.BYOC and deployment.tenant_id != scope.tenant:
                raise MetastoreConflict(
                    f"deployment {deployment_id!r} is a BYOC deployment of tenant "
                    f"{deployment.tenant_id!r}; it cannot serve {scope_text(scope)} of tenant "
                    f"{scope.tenant!r}"
                )
            values = {
                **scope_values(scope),
                "deployment_id": deployment_id,
                "assigned_at": self.now(),
            }
            what = f"assignment of {scope_text(scope)} to deployment {deployment_id!r}"
            self.insert_new(c, t.deployment_environments, values, what)

    def unassign_environment(self, deployment_id: str, scope: Scope) -> None:
        de = t.deployment_environments
        with self.write() as c:
            self._require_deployment(c, deployment_id)
            gone = c.execute(
                delete(de).where(de.c.deployment_id == deployment_id, where_scope(de, scope))
            )
            if gone.rowcount == 0:
                raise NotFoundInMetastore(
                    f"deployment {deployment_id!r} does not serve {scope_text(scope)}"
                )

    def deployment_serves(self, deployment_id: str, scope: Scope) -> bool:
        de = t.deployment_environments
        query = select(de.c.deployment_id).where(
            de.c.deployment_id == valid_id("deployment", deployment_id), where_scope(de, scope)
        )
        with self.read() as c:
            return c.execute(query).first() is not None

    def deployment_environments(self, deployment_id: str) -> list[Scope]:
        """The environments the deployment serves, sorted."""
        de = t.deployment_environments
        with self.read() as c:
            self._require_deployment(c, deployment_id)
            rows = c.execute(select(de).where(de.c.deployment_id == deployment_id)).all()
        return sorted(Scope(r.tenant_id, r.project_id, r.environment_id) for r in rows)

    @staticmethod
    def _require_deployment(c: Connection, deployment_id: str) -> Row[Any]:
        d = t.deployments
        query = select(d).where(d.c.deployment_id == valid_id("deployment", deployment_id))
        row = c.execute(query).first()
        if row is None:
            raise NotFoundInMetastore(f"deployment {deployment_id!r} does not exist")
        return row

    # -- tokens ------------------------------------------------------------------------------

    def record_token(self, record: TokenRecord) -> None:
        """Keep an issued token's record. Its tenant, project, environments, deployment (same
        cell; a BYOC one of the same tenant) and the token it replaces must be stored."""
        _check_token_shape(record)
        with self.write() as c:
            self._check_token_references(c, record)
            self.insert_new(c, t.tokens, _token_values(record), f"token {record.token_id!r}")

    def get_token(self, token_id: str) -> TokenRecord | None:
        query = select(t.tokens).where(t.tokens.c.token_id == valid_id("token", token_id))
        with self.read() as c:
            row = c.execute(query).first()
        return None if row is None else _token(row)

    def token_state(self, token_id: str, token_hash: str) -> TokenState:
        """``unknown`` for an id not stored or a hash that differs (compared in constant time);
        else ``revoked`` or ``active``. Expiry is the caller's check (the token's ``exp``)."""
        try:
            valid_id("token", token_id)
        except InvalidArgument:
            return "unknown"
        tk = t.tokens
        query = select(tk.c.token_hash, tk.c.revoked_at).where(tk.c.token_id == token_id)
        with self.read() as c:
            row = c.execute(query).first()
        if row is None or not hmac.compare_digest(
            row.token_hash.encode(), str(token_hash).encode("utf-8", "surrogatepass")
        ):
            return "unknown"
        return "active" if row.revoked_at is None else "revoked"

    def revoke_token(self, token_id: str) -> bool:
        """Revoke the token; True if it was active, False if it was already revoked."""
        tk = t.tokens
        valid_id("token", token_id)
        with self.write() as c:
            changed = c.execute(
                update(tk)
                .where(tk.c.token_id == token_id, tk.c.revoked_at.is_(None))
                .values(revoked_at=self.now())
            )
            if changed.rowcount == 1:
                return True
            if c.execute(select(tk.c.token_id).where(tk.c.token_id == token_id)).first() is None:
                raise NotFoundInMetastore(f"token {token_id!r} does not exist")
            return False

    def revoked_token_ids(self) -> list[str]:
        """Ids of revoked tokens that have not expired yet (expired ones are refused anyway)."""
        tk = t.tokens
        query = select(tk.c.token_id).where(
            tk.c.revoked_at.is_not(None), tk.c.expires_at > self.now()
        )
        with self.read() as c:
            return sorted(c.execute(query).scalars())

    def list_tokens(
        self, tenant_id: str | None = None, include_revoked: bool = False
    ) -> list[TokenRecord]:
        """Token records, oldest first; revoked ones only with ``include_revoked``."""
        tk = t.tokens
        query = select(tk).order_by(tk.c.issued_at, tk.c.token_id)
        if tenant_id is not None:
            query = query.where(tk.c.tenant_id == valid_id("tenant", tenant_id))
        if not include_revoked:
            query = query.where(tk.c.revoked_at.is_(None))
        with self.read() as c:
            return [_token(row) for row in c.execute(query)]

    def _check_token_references(self, c: Connection, record: TokenRecord) -> None:
        self.require_tenant(c, record.tenant_id)
        if record.project_id is not None:
            self.require_project(c, record.tenant_id, record.project_id)
            for environment in record.environments:
                self.require_environment(c, Scope(record.tenant_id, record.project_id, environment))
        if record.deployment_id is not None:
            deployment = _deployment(self._require_deployment(c, record.deployment_id))
            if (
                deployment.tenant_id not in (None, record.tenant_id)
                or deployment.cell != record.cell
            ):
                raise MetastoreConflict(
                    f"token {record.token_id!r} is for tenant {record.tenant_id!r} in cell "
                    f"{record.cell!r}, but deployment {deployment.deployment_id!r} is in cell "
                    f"{deployment.cell!r} and belongs to tenant {deployment.tenant_id!r}"
                )
        if record.replaces is not None:
            replaced = c.execute(
                select(t.tokens).where(t.tokens.c.token_id == record.replaces)
            ).first()
            if replaced is None:
                raise NotFoundInMetastore(f"replaced token {record.replaces!r} does not exist")
            if replaced.tenant_id != record.tenant_id or replaced.kind != record.kind.value:
                raise MetastoreConflict(
                    f"token {record.token_id!r} cannot replace {record.replaces!r}: "
                    "a token replaces only one of the same tenant and kind"
                )


def _check_token_shape(record: TokenRecord) -> None:
    valid_id("token", record.token_id)
    valid_id("tenant", record.tenant_id)
    if not isinstance(record.kind, TokenKind):
        raise InvalidArgument(f"token kind {record.kind!r} is not one of user, publisher, workload")
    if not (isinstance(record.token_hash, str) and _TOKEN_HASH.fullmatch(record.token_hash)):
        raise InvalidArgument(
            "token_hash must be the SHA-256 of the token text as 64 lowercase hex"
        )
    for name in ("project_id", "deployment_id", "cell", "replaces"):
        if (value := getattr(record, name)) is not None:
            valid_id(name, value)
    for environment in record.environments:
        valid_id("environment", environment)
    if not (isinstance(record.issued_at, int) and isinstance(record.expires_at, int)):
        raise InvalidArgument("issued_at and expires_at must be integer Unix seconds")
    if record.expires_at <= record.issued_at:
        raise InvalidArgument(f"token {record.token_id!r} expires before it is issued")
    problem = _kind_problem(record)
    if problem is not None:
        raise InvalidArgument(f"{record.kind.value} token {record.token_id!r}: {problem}")


def _kind_problem(record: TokenRecord) -> str | None:
    workload = record.kind is TokenKind.WORKLOAD
    if workload and (record.deployment_id is None or record.cell is None):
        return "needs deployment_id and cell"
    if workload and (record.project_id or record.environments or record.erasure):
        return "takes no project, environments or erasure"
    if not workload and (record.deployment_id is not None or record.cell is not None):
        return "takes no deployment_id or cell"
    if not workload and (record.project_id is None or not record.environments):
        return "needs project_id and at least one environment"
    if record.kind is TokenKind.PUBLISHER and (len(record.environments) != 1 or record.erasure):
        return "binds exactly one environment and has no erasure permission"
    return None


def _deployment(row: Row[Any]) -> DeploymentRecord:
    return DeploymentRecord(
        row.deployment_id, DeploymentKind(row.kind), row.cell, row.tenant_id, row.created_at
    )


def _token_values(record: TokenRecord) -> dict[str, Any]:
    return {
        **record_values(record),
        "kind": record.kind.value,
        "environments": json.dumps(list(record.environments)),
    }


def _token(row: Row[Any]) -> TokenRecord:
    """A stored token row; :class:`MetastoreError` (terminal) naming it when it is damaged
    (its ``kind`` or ``environments`` is not what this version writes)."""
    try:
        return _token_record(row)
    except (ValueError, TypeError, RecursionError) as exc:
        raise MetastoreError(
            f"token {row.token_id!r:.80} in the metastore cannot be read "
            f"({type(exc).__name__}: {str(exc)[:120]})"
        ) from exc


def _token_record(row: Row[Any]) -> TokenRecord:
    environments = json.loads(row.environments)
    if not isinstance(environments, list) or not all(isinstance(e, str) for e in environments):
        raise TypeError("environments is not a list of text")
    return TokenRecord(
        token_id=row.token_id,
        kind=TokenKind(row.kind),
        tenant_id=row.tenant_id,
        token_hash=row.token_hash,
        issued_at=row.issued_at,
        expires_at=row.expires_at,
        project_id=row.project_id,
        environments=tuple(environments),
        erasure=bool(row.erasure),
        deployment_id=row.deployment_id,
        cell=row.cell,
        revoked_at=row.revoked_at,
        replaces=row.replaces,
    )
