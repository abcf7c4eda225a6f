"""What every part of the store shares: id checks, scope predicates, transactions, and the
parent lookups that stand in for foreign keys (PlanetScale does not enforce them)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Table, and_, insert, select
from sqlalchemy.exc import IntegrityError

from baml_studio.control.metastore import tables as t
from baml_studio.control.metastore.engine import WRITE, create_metastore_engine, translated_errors
from baml_studio.control.metastore.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidId,
    NotFoundInMetastore,
)
from baml_studio.gateway.config import Scope, validate_scope_part

_GENERATION = re.compile(r"gen_([1-9][0-9]{0,17})")


def valid_id(name: str, value: object) -> str:
    """``value`` if it is a valid id (the scope-part rule), else :class:`InvalidId`."""
    try:
        return validate_scope_part(name, value)
    except ValueError as exc:
        raise InvalidId(str(exc)) from exc


def valid_name(name: str | None) -> str | None:
    """A display name of 1-256 characters that UTF-8 can encode, or ``None`` (bytes that are
    not UTF-8 on a command line reach Python as lone surrogates, which no database takes)."""
    if name is not None and not (isinstance(name, str) and 0 < len(name) <= t.NAME_LENGTH):
        raise InvalidArgument(f"name {name!r} must be 1-{t.NAME_LENGTH} characters, or omitted")
    if name is not None:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"name {name!r} is not text UTF-8 can encode (was it typed in another encoding?)"
            ) from None
    return name


def generation_number(generation: str) -> int:
    """``n`` of ``gen_<n>``; :class:`InvalidArgument` for any other text."""
    match = _GENERATION.fullmatch(generation)
    if match is None:
        raise InvalidArgument(f"generation {generation!r} is not gen_<n> with n >= 1")
    return int(match.group(1))


def where_scope(table: Table, scope: Scope) -> ColumnElement[bool]:
    """Rows of ``table`` (with tenant, project and environment columns) in ``scope``."""
    return and_(
        table.c.tenant_id == scope.tenant,
        table.c.project_id == scope.project,
        table.c.environment_id == scope.environment,
    )


def scope_values(scope: Scope) -> dict[str, str]:
    return {
        "tenant_id": scope.tenant,
        "project_id": scope.project,
        "environment_id": scope.environment,
    }


def record_values(record: Any) -> dict[str, Any]:
    """The fields of a slotted dataclass record, by name (its table's columns)."""
    return {name: getattr(record, name) for name in record.__slots__}


def scope_text(scope: Scope) -> str:
    return f"{scope.tenant}/{scope.project}/{scope.environment}"


class StoreBase:
    """An engine, a clock, transactions and parent lookups."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = create_metastore_engine(url)
        self._clock = clock

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    @property
    def dialect(self) -> str:
        """``sqlite``, ``postgresql`` or ``mysql``."""
        return self._engine.dialect.name

    def now(self) -> int:
        """The clock as integer Unix seconds."""
        return int(self._clock())

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with translated_errors(), self._engine.connect() as connection:
            yield connection

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction (SQLite: ``BEGIN IMMEDIATE``), committed on success."""
        with translated_errors(), self._engine.connect() as connection:
            connection.execution_options(**{WRITE: True})
            with connection.begin():
                yield connection

    @staticmethod
    def insert_new(c: Connection, table: Table, values: Mapping[str, Any], what: str) -> None:
        """Insert one row; :class:`AlreadyExists` naming ``what`` if its key is taken."""
        try:
            c.execute(insert(table).values(**values))
        except IntegrityError as exc:
            raise AlreadyExists(f"{what} already exists") from exc

    @staticmethod
    def require_tenant(c: Connection, tenant_id: str) -> None:
        tenants = t.tenants
        query = select(tenants.c.tenant_id).where(tenants.c.tenant_id == tenant_id)
        if c.execute(query).first() is None:
            raise NotFoundInMetastore(
                f"tenant {tenant_id!r} does not exist; create it with "
                f"`baml-studio admin tenants create {tenant_id}`"
            )

    @classmethod
    def require_project(cls, c: Connection, tenant_id: str, project_id: str) -> None:
        cls.require_tenant(c, tenant_id)
        p = t.projects
        query = select(p.c.project_id).where(
            p.c.tenant_id == tenant_id, p.c.project_id == project_id
        )
        if c.execute(query).first() is None:
            raise NotFoundInMetastore(
                f"project {tenant_id}/{project_id} does not exist; create it with "
                f"`baml-studio admin projects create {tenant_id} {project_id}`"
            )

    @staticmethod
    def require_environment(c: Connection, scope: Scope, *, lock: bool = False) -> Row[Any]:
        """The environment's row (``SELECT ... FOR UPDATE`` with ``lock``), else not found."""
        query = select(t.environments).where(where_scope(t.environments, scope))
        row = c.execute(query.with_for_update() if lock else query).first()
        if row is None:
            raise NotFoundInMetastore(
                f"environment {scope_text(scope)} does not exist; create it with "
                f"`baml-studio admin environments create {scope.tenant} {scope.project} "
                f"{scope.environment}`"
            )
        return row
