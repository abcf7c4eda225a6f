"""The metastore schema as SQLAlchemy Core tables.

The migrations under ``migrations/versions`` create exactly this schema (a test compares them).
Ids are strings of at most :data:`ID_LENGTH` characters, times are integer Unix seconds. There
are no foreign keys: PlanetScale does not enforce them, so the store checks parents in code.
On MySQL every table uses the binary collation, so ids compare case-sensitively as they do on
PostgreSQL and SQLite. Nothing here is per object or per flush.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    MetaData,
    String,
    Table,
    Text,
)

ID_LENGTH = 128
"""Longest id (tenant, project, environment, deployment, cell, token, catalog version)."""

NAME_LENGTH = 256
"""Longest display name of a tenant, project or environment."""

GENERATION_LENGTH = 32
"""Longest generation text, ``gen_<n>``."""

MYSQL_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
"""Table options on MySQL/MariaDB: case-sensitive, byte-wise comparison of ids."""

metadata = MetaData()


def _id(name: str, *, primary_key: bool = False, nullable: bool = False) -> Column[str]:
    return Column(name, String(ID_LENGTH), primary_key=primary_key, nullable=nullable)


def _time(name: str, *, nullable: bool = False) -> Column[int]:
    return Column(name, BigInteger, nullable=nullable)


tenants = Table(
    "tenants",
    metadata,
    _id("tenant_id", primary_key=True),
    Column("name", String(NAME_LENGTH), nullable=True),
    _time("created_at"),
    **MYSQL_OPTIONS,
)

projects = Table(
    "projects",
    metadata,
    _id("tenant_id", primary_key=True),
    _id("project_id", primary_key=True),
    Column("name", String(NAME_LENGTH), nullable=True),
    _time("created_at"),
    **MYSQL_OPTIONS,
)

environments = Table(
    "environments",
    metadata,
    _id("tenant_id", primary_key=True),
    _id("project_id", primary_key=True),
    _id("environment_id", primary_key=True),
    Column("name", String(NAME_LENGTH), nullable=True),
    Column("active_generation", String(GENERATION_LENGTH), nullable=False),
    _time("created_at"),
    **MYSQL_OPTIONS,
)

generations = Table(
    "generations",
    metadata,
    _id("tenant_id", primary_key=True),
    _id("project_id", primary_key=True),
    _id("environment_id", primary_key=True),
    Column("generation", String(GENERATION_LENGTH), primary_key=True),
    _time("created_at"),
    **MYSQL_OPTIONS,
)

deployments = Table(
    "deployments",
    metadata,
    _id("deployment_id", primary_key=True),
    Column("kind", String(16), nullable=False),
    _id("cell"),
    _id("tenant_id", nullable=True),
    _time("created_at"),
    **MYSQL_OPTIONS,
)

deployment_environments = Table(
    "deployment_environments",
    metadata,
    _id("deployment_id", primary_key=True),
    _id("tenant_id", primary_key=True),
    _id("project_id", primary_key=True),
    _id("environment_id", primary_key=True),
    _time("assigned_at"),
    **MYSQL_OPTIONS,
)

tokens = Table(
    "tokens",
    metadata,
    _id("token_id", primary_key=True),
    Column("kind", String(16), nullable=False),
    _id("tenant_id"),
    _id("project_id", nullable=True),
    Column("environments", Text, nullable=False),
    Column("erasure", Boolean, nullable=False),
    _id("deployment_id", nullable=True),
    _id("cell", nullable=True),
    Column("token_hash", String(64), nullable=False),
    _time("issued_at"),
    _time("expires_at"),
    _time("revoked_at", nullable=True),
    _id("replaces", nullable=True),
    Index("ix_tokens_tenant_id", "tenant_id"),
    Index("ix_tokens_revoked_at", "revoked_at"),
    **MYSQL_OPTIONS,
)

catalog_versions = Table(
    "catalog_versions",
    metadata,
    _id("catalog_version", primary_key=True),
    Column("schema_digest", String(ID_LENGTH), nullable=False),
    _time("registered_at"),
    **MYSQL_OPTIONS,
)
