"""Migrations, packaging, URLs and the error tree of the metastore."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from metastore_servers import closed_port
from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import OperationalError

from baml_studio.control.metastore import (
    AlreadyExists,
    InvalidArgument,
    InvalidId,
    Metastore,
    MetastoreConflict,
    MetastoreError,
    MetastoreUnavailable,
    NotFoundInMetastore,
    errors,
)
from baml_studio.control.metastore.engine import MIGRATIONS, alembic_config
from baml_studio.control.metastore.tables import metadata
from baml_studio.format.errors import BamlStudioError

pytest_plugins = ("metastore_servers",)

ROOT = Path(__file__).resolve().parents[2]


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def test_open_migrates_an_empty_database_to_the_schema_of_tables(fresh_metastore_url: str) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert _revision(fresh_metastore_url) is None
    with Metastore.open(fresh_metastore_url):
        pass
    assert head is not None
    assert _revision(fresh_metastore_url) == head
    engine = create_engine(fresh_metastore_url)
    try:
        with engine.connect() as connection:
            assert set(metadata.tables) <= set(inspect(connection).get_table_names())
            differences = compare_metadata(MigrationContext.configure(connection), metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_migrating_again_is_a_no_op(fresh_metastore_url: str) -> None:
    with Metastore.open(fresh_metastore_url) as store:
        store.create_tenant("acme")
        store.migrate()
    with Metastore.open(fresh_metastore_url) as store:
        assert [t.tenant_id for t in store.list_tenants()] == ["acme"]
        head = _revision(fresh_metastore_url)
        store.migrate()
    assert _revision(fresh_metastore_url) == head


def test_downgrade_to_base_and_back(fresh_metastore_url: str) -> None:
    Metastore.open(fresh_metastore_url).close()
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", fresh_metastore_url)
    command.downgrade(config, "base")
    engine = create_engine(fresh_metastore_url)
    try:
        with engine.connect() as connection:
            assert not set(metadata.tables) & set(inspect(connection).get_table_names())
    finally:
        engine.dispose()
    with Metastore.open(fresh_metastore_url) as store:
        assert store.list_tenants() == []


def test_migration_files_ship_with_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["baml_studio.control.metastore"]
    package = MIGRATIONS.parent
    shipped = sorted(
        str(path.relative_to(package))
        for path in MIGRATIONS.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )
    assert {"migrations/env.py", "migrations/script.py.mako"} <= set(shipped)
    assert "migrations/versions/0001_initial.py" in shipped
    for name in shipped:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("postgresql+psycopg://postgres@127.0.0.1:{port}/x", id="postgresql"),
        pytest.param("mysql+pymysql://root@127.0.0.1:{port}/x", id="mysql"),
    ],
)
def test_an_unreachable_server_is_unavailable(url: str) -> None:
    with pytest.raises(MetastoreUnavailable, match=r"unavailable.*retry") as caught:
        Metastore.open(url.format(port=closed_port()))
    assert caught.value.transient
    assert isinstance(caught.value.__cause__, OperationalError)


def test_an_unusable_sqlite_path_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(MetastoreUnavailable):
        Metastore.open(f"sqlite:///{blocker}/sub/metastore.db")
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(MetastoreUnavailable):
        Metastore.open(f"sqlite:///{tmp_path / 'dir.db'}")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "not a database URL"),
        ("oracle://scott@db/x", "'oracle' is not supported"),
        ("postgresql+nodriver://u@h/x", "no database driver"),
    ],
)
def test_bad_urls_are_invalid_arguments(url: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Metastore(url)


def test_the_error_tree() -> None:
    assert issubclass(MetastoreError, BamlStudioError)
    leaves = [AlreadyExists, NotFoundInMetastore, MetastoreConflict, MetastoreUnavailable]
    for error in [*leaves, InvalidArgument, InvalidId]:
        assert issubclass(error, MetastoreError)
        assert error.__name__ in (errors.__doc__ or "")
        assert error.transient is (error is MetastoreUnavailable)
    assert issubclass(InvalidId, InvalidArgument)
    assert issubclass(InvalidArgument, ValueError)
