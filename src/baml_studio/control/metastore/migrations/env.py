"""Alembic environment of the metastore.

The store runs it programmatically (:func:`baml_studio.control.metastore.store.upgrade`) with
an open connection in ``config.attributes["connection"]``; the ``alembic`` command line works
too, with ``sqlalchemy.url`` set in its configuration.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from baml_studio.control.metastore.tables import metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if isinstance(connection, Connection):
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("set sqlalchemy.url or pass a connection in config.attributes")
    engine = create_engine(url)
    try:
        with engine.begin() as own:
            _run(own)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
