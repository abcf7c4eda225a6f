"""The initial metastore schema: hierarchy, generations, deployments, tokens, catalog versions.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

A frozen copy of the schema at this revision (it does not import ``tables.py``, which keeps
moving); ``tests/control/test_metastore_migrations.py`` checks the two agree at head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _id(name: str, *, primary_key: bool = False, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.String(128), primary_key=primary_key, nullable=nullable)


def _time(name: str, *, nullable: bool = False) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger, nullable=nullable)


def _scope() -> list[sa.Column[str]]:
    return [_id(part, primary_key=True) for part in ("tenant_id", "project_id", "environment_id")]


def upgrade() -> None:
    op.create_table(
        "tenants",
        _id("tenant_id", primary_key=True),
        sa.Column("name", sa.String(256), nullable=True),
        _time("created_at"),
        **_MYSQL,
    )
    op.create_table(
        "projects",
        _id("tenant_id", primary_key=True),
        _id("project_id", primary_key=True),
        sa.Column("name", sa.String(256), nullable=True),
        _time("created_at"),
        **_MYSQL,
    )
    op.create_table(
        "environments",
        *_scope(),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("active_generation", sa.String(32), nullable=False),
        _time("created_at"),
        **_MYSQL,
    )
    op.create_table(
        "generations",
        *_scope(),
        sa.Column("generation", sa.String(32), primary_key=True),
        _time("created_at"),
        **_MYSQL,
    )
    op.create_table(
        "deployments",
        _id("deployment_id", primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        _id("cell"),
        _id("tenant_id", nullable=True),
        _time("created_at"),
        **_MYSQL,
    )
    op.create_table(
        "deployment_environments",
        _id("deployment_id", primary_key=True),
        *_scope(),
        _time("assigned_at"),
        **_MYSQL,
    )
    op.create_table(
        "tokens",
        _id("token_id", primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        _id("tenant_id"),
        _id("project_id", nullable=True),
        sa.Column("environments", sa.Text, nullable=False),
        sa.Column("erasure", sa.Boolean, nullable=False),
        _id("deployment_id", nullable=True),
        _id("cell", nullable=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        _time("issued_at"),
        _time("expires_at"),
        _time("revoked_at", nullable=True),
        _id("replaces", nullable=True),
        **_MYSQL,
    )
    op.create_index("ix_tokens_tenant_id", "tokens", ["tenant_id"])
    op.create_index("ix_tokens_revoked_at", "tokens", ["revoked_at"])
    op.create_table(
        "catalog_versions",
        _id("catalog_version", primary_key=True),
        sa.Column("schema_digest", sa.String(128), nullable=False),
        _time("registered_at"),
        **_MYSQL,
    )


def downgrade() -> None:
    for table in (
        "catalog_versions",
        "tokens",
        "deployment_environments",
        "deployments",
        "generations",
        "environments",
        "projects",
        "tenants",
    ):
        op.drop_table(table)
