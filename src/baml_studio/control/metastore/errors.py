"""Typed errors of the control-plane metastore.

Exception tree::

    BamlStudioError
    └── MetastoreError                 any metastore failure (terminal unless marked)
        ├── InvalidArgument            a value the metastore refuses (also a ``ValueError``)
        │   └── InvalidId              id text that breaks the id rule (tenant, project, ...)
        ├── AlreadyExists              creating a tenant, project, ... that is already stored
        ├── NotFoundInMetastore        a referenced tenant, project, environment, ... is missing
        ├── MetastoreConflict          the request contradicts stored state or an ownership rule
        └── MetastoreUnavailable       transient: the database could not be reached or was busy

``transient`` is True only for :class:`MetastoreUnavailable`: retrying the same call may
succeed. Every other error is terminal for the same input. The store wraps SQLAlchemy and
driver errors with ``raise ... from exc``; no vendor exception escapes it.
"""

from __future__ import annotations

from typing import ClassVar

from baml_studio.format.errors import BamlStudioError


class MetastoreError(BamlStudioError):
    """Any failure of a metastore operation."""

    transient: ClassVar[bool] = False


class InvalidArgument(MetastoreError, ValueError):
    """A value the metastore cannot hold or a combination it refuses (fix the input)."""


class InvalidId(InvalidArgument):
    """Id text that breaks the id rule: 1-128 characters of ``A-Z a-z 0-9 _ . -``."""


class AlreadyExists(MetastoreError):
    """The object to create is already stored; the stored object is unchanged."""


class NotFoundInMetastore(MetastoreError):
    """A tenant, project, environment, deployment, token or assignment that is not stored."""


class MetastoreConflict(MetastoreError):
    """The request contradicts stored state: another digest for a registered catalog version,
    an environment of another tenant for a BYOC deployment, a token for a foreign deployment."""


class MetastoreUnavailable(MetastoreError):
    """The database could not be reached, dropped the connection or was busy. Retry."""

    transient = True
