"""The control-plane metastore: the system of record for tenants, projects, environments and
their active generation, deployments and their environments, issued tokens (hashed) and
catalog versions. SQLite embedded, PostgreSQL or MySQL/PlanetScale through SQLAlchemy Core;
Alembic migrations (``migrations/``) run to head by :meth:`Metastore.open`.

Example::

    with Metastore.open("sqlite:///data/metastore.db") as store:
        store.create_tenant("acme")
"""

from baml_studio.control.metastore.access import TokenState
from baml_studio.control.metastore.engine import sqlite_url
from baml_studio.control.metastore.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidId,
    MetastoreConflict,
    MetastoreError,
    MetastoreUnavailable,
    NotFoundInMetastore,
)
from baml_studio.control.metastore.store import (
    FIRST_GENERATION,
    CatalogVersion,
    Metastore,
    ProjectRecord,
    TenantRecord,
)

__all__ = [
    "FIRST_GENERATION",
    "AlreadyExists",
    "CatalogVersion",
    "InvalidArgument",
    "InvalidId",
    "Metastore",
    "MetastoreConflict",
    "MetastoreError",
    "MetastoreUnavailable",
    "NotFoundInMetastore",
    "ProjectRecord",
    "TenantRecord",
    "TokenState",
    "sqlite_url",
]
