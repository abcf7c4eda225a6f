"""The control-plane metastore: tenants, projects, environments, generations, deployments,
the token registry and catalog versions, over SQLAlchemy Core.

``Metastore.open(url)`` migrates the database to head and returns the store. Every method is
synchronous, runs in its own transaction and is safe to call from several threads (the engine
pools connections). Parents are checked in code, never through foreign keys (PlanetScale does
not enforce them). Errors are the types of :mod:`.errors`; no SQLAlchemy error escapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, select, update

from baml_studio.control.metastore import tables as t
from baml_studio.control.metastore.access import AccessStore
from baml_studio.control.metastore.base import (
    generation_number,
    record_values,
    scope_text,
    scope_values,
    valid_id,
    valid_name,
    where_scope,
)
from baml_studio.control.metastore.engine import upgrade_to_head
from baml_studio.control.metastore.errors import (
    AlreadyExists,
    InvalidArgument,
    MetastoreConflict,
)
from baml_studio.control.model import EnvironmentRecord, GenerationRecord
from baml_studio.gateway.config import Scope

FIRST_GENERATION = "gen_1"


@dataclass(frozen=True, slots=True)
class TenantRecord:
    tenant_id: str
    name: str | None
    created_at: int


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    tenant_id: str
    project_id: str
    name: str | None
    created_at: int


@dataclass(frozen=True, slots=True)
class CatalogVersion:
    version: str
    schema_digest: str
    registered_at: int
    """Unix seconds of the first registration."""


class Metastore(AccessStore):
    """The metastore at a SQLAlchemy URL. Use :meth:`open` to migrate it first."""

    @classmethod
    def open(cls, url: str, *, clock: Callable[[], float] = time.time) -> Metastore:
        """The store at ``url`` after running its migrations to head."""
        store = cls(url, clock=clock)
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
        return store

    def migrate(self) -> None:
        """Apply every migration not yet applied (a no-op at head)."""
        upgrade_to_head(self._engine)

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- hierarchy ---------------------------------------------------------------------------

    def create_tenant(self, tenant_id: str, name: str | None = None) -> TenantRecord:
        record = TenantRecord(valid_id("tenant", tenant_id), valid_name(name), self.now())
        with self.write() as c:
            self.insert_new(c, t.tenants, record_values(record), f"tenant {tenant_id!r}")
        return record

    def create_project(
        self, tenant_id: str, project_id: str, name: str | None = None
    ) -> ProjectRecord:
        valid_id("tenant", tenant_id)
        record = ProjectRecord(
            tenant_id, valid_id("project", project_id), valid_name(name), self.now()
        )
        with self.write() as c:
            self.require_tenant(c, tenant_id)
            self.insert_new(
                c, t.projects, record_values(record), f"project {tenant_id}/{project_id}"
            )
        return record

    def create_environment(
        self, tenant_id: str, project_id: str, environment_id: str, name: str | None = None
    ) -> EnvironmentRecord:
        """A new environment whose active generation is ``gen_1`` (recorded in its history)."""
        scope = Scope(
            valid_id("tenant", tenant_id),
            valid_id("project", project_id),
            valid_id("environment", environment_id),
        )
        now = self.now()
        values = {**scope_values(scope), "created_at": now}
        with self.write() as c:
            self.require_project(c, tenant_id, project_id)
            env = {**values, "name": valid_name(name), "active_generation": FIRST_GENERATION}
            self.insert_new(c, t.environments, env, f"environment {scope_text(scope)}")
            first = {**values, "generation": FIRST_GENERATION}
            self.insert_new(c, t.generations, first, f"generations of {scope_text(scope)}")
        return EnvironmentRecord(tenant_id, project_id, environment_id, FIRST_GENERATION, now)

    def get_environment(self, scope: Scope) -> EnvironmentRecord | None:
        query = select(t.environments).where(where_scope(t.environments, scope))
        with self.read() as c:
            row = c.execute(query).first()
        return None if row is None else _environment(row)

    def list_tenants(self) -> list[TenantRecord]:
        with self.read() as c:
            rows = c.execute(select(t.tenants).order_by(t.tenants.c.tenant_id)).all()
        return [TenantRecord(r.tenant_id, r.name, r.created_at) for r in rows]

    def list_projects(self, tenant_id: str) -> list[ProjectRecord]:
        p = t.projects
        query = select(p).where(p.c.tenant_id == valid_id("tenant", tenant_id))
        with self.read() as c:
            self.require_tenant(c, tenant_id)
            rows = c.execute(query.order_by(p.c.project_id)).all()
        return [ProjectRecord(r.tenant_id, r.project_id, r.name, r.created_at) for r in rows]

    def list_environments(
        self, tenant_id: str, project_id: str | None = None
    ) -> list[EnvironmentRecord]:
        """The tenant's environments (only the project's with ``project_id``), sorted."""
        env = t.environments
        query = select(env).where(env.c.tenant_id == valid_id("tenant", tenant_id))
        if project_id is not None:
            query = query.where(env.c.project_id == valid_id("project", project_id))
        with self.read() as c:
            if project_id is None:
                self.require_tenant(c, tenant_id)
            else:
                self.require_project(c, tenant_id, project_id)
            rows = c.execute(query.order_by(env.c.project_id, env.c.environment_id)).all()
        return [_environment(row) for row in rows]

    # -- generations -------------------------------------------------------------------------

    def active_generation(self, scope: Scope) -> str:
        with self.read() as c:
            return str(self.require_environment(c, scope).active_generation)

    def bump_generation(self, scope: Scope) -> str:
        """Make ``gen_<n+1>`` active and record it. Concurrent bumps each get their own ``n``:
        the environment row is locked (FOR UPDATE; SQLite: the write lock) for the change."""
        env = t.environments
        with self.write() as c:
            current = self.require_environment(c, scope, lock=True).active_generation
            new = f"gen_{generation_number(current) + 1}"
            changed = c.execute(
                update(env)
                .where(where_scope(env, scope), env.c.active_generation == current)
                .values(active_generation=new)
            )
            if changed.rowcount != 1:
                raise MetastoreConflict(
                    f"the generation of {scope_text(scope)} changed during the bump; retry"
                )
            values = {**scope_values(scope), "generation": new, "created_at": self.now()}
            self.insert_new(c, t.generations, values, f"{new} of {scope_text(scope)}")
        return new

    def generations(self, scope: Scope) -> list[GenerationRecord]:
        """Every generation the environment has had, oldest first."""
        g = t.generations
        with self.read() as c:
            active = self.require_environment(c, scope).active_generation
            rows = c.execute(select(g).where(where_scope(g, scope))).all()
        records = [
            GenerationRecord(
                r.tenant_id,
                r.project_id,
                r.environment_id,
                r.generation,
                r.created_at,
                r.generation == active,
            )
            for r in rows
        ]
        return sorted(records, key=lambda record: generation_number(record.generation))

    def generation_exists(self, scope: Scope, generation: str) -> bool:
        g = t.generations
        query = select(g.c.generation).where(where_scope(g, scope), g.c.generation == generation)
        with self.read() as c:
            return c.execute(query).first() is not None

    # -- catalog versions --------------------------------------------------------------------

    def register_catalog_version(self, version: str, schema_digest: str) -> CatalogVersion:
        """Register ``version`` with its schema digest. Registering it again with the same
        digest returns the stored record; another digest is a :class:`MetastoreConflict`."""
        valid_id("catalog version", version)
        if not (isinstance(schema_digest, str) and 0 < len(schema_digest) <= t.ID_LENGTH):
            raise InvalidArgument(f"schema digest {schema_digest!r} must be 1-128 characters")
        existing = self.catalog_version(version)
        if existing is None:
            record = CatalogVersion(version, schema_digest, self.now())
            values = {
                "catalog_version": version,
                "schema_digest": schema_digest,
                "registered_at": record.registered_at,
            }
            try:
                with self.write() as c:
                    self.insert_new(c, t.catalog_versions, values, f"catalog version {version!r}")
                return record
            except AlreadyExists:
                existing = self.catalog_version(version)  # registered concurrently
                if existing is None:
                    raise
        if existing.schema_digest != schema_digest:
            raise MetastoreConflict(
                f"catalog version {version!r} is registered with schema digest "
                f"{existing.schema_digest!r}, not {schema_digest!r}; a catalog version never "
                "changes its schema: register the new schema under a new version"
            )
        return existing

    def catalog_version(self, version: str) -> CatalogVersion | None:
        cv = t.catalog_versions
        query = select(cv).where(cv.c.catalog_version == valid_id("catalog version", version))
        with self.read() as c:
            row = c.execute(query).first()
        return None if row is None else _catalog_version(row)

    def catalog_versions(self) -> list[CatalogVersion]:
        """Every registered catalog version, in registration order."""
        cv = t.catalog_versions
        query = select(cv).order_by(cv.c.registered_at, cv.c.catalog_version)
        with self.read() as c:
            return [_catalog_version(row) for row in c.execute(query)]


def _environment(row: Row[Any]) -> EnvironmentRecord:
    return EnvironmentRecord(
        row.tenant_id, row.project_id, row.environment_id, row.active_generation, row.created_at
    )


def _catalog_version(row: Row[Any]) -> CatalogVersion:
    return CatalogVersion(row.catalog_version, row.schema_digest, row.registered_at)
