"""``baml-studio admin``: a thin shell over the control-plane metastore
(:mod:`baml_studio.control.metastore`). Register with ``main.add_command(admin_group)``.

Other modules add subcommands to :data:`admin_group` with :func:`with_metastore` (the
``--metastore``/``--data`` options, the opened store, the exit codes) and :func:`echo_json`, so
every ``admin`` command takes the same options, prints one JSON object and fails the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from baml_studio.control.metastore import (
    AlreadyExists,
    InvalidArgument,
    Metastore,
    MetastoreConflict,
    MetastoreError,
    MetastoreUnavailable,
    NotFoundInMetastore,
    sqlite_url,
)
from baml_studio.control.model import DeploymentKind
from baml_studio.gateway.config import Scope

EXIT_INPUT = 2
EXIT_UNAVAILABLE = 3

Command = Callable[..., None]


class AdminInputError(click.ClickException):
    """Bad input: an invalid id, or something missing, already existing or conflicting."""

    exit_code = EXIT_INPUT


class AdminUnavailable(click.ClickException):
    """The metastore could not be reached or was busy; retrying may succeed."""

    exit_code = EXIT_UNAVAILABLE


def metastore_url(metastore_url: str | None, data: Path | None) -> str:
    """The URL from ``--metastore`` or ``--data`` (a usage error unless exactly one is given)."""
    if metastore_url is not None and data is None:
        return metastore_url
    if data is not None and metastore_url is None:
        return sqlite_url(data.resolve() / "metastore.db")
    raise click.UsageError("give exactly one of --metastore URL or --data DIR")


@contextmanager
def opened_metastore(url: str | None, data: Path | None) -> Iterator[Metastore]:
    """The migrated metastore; library errors in the block become :class:`AdminInputError` or
    :class:`AdminUnavailable`."""
    try:
        with Metastore.open(metastore_url(url, data)) as store:
            yield store
    except MetastoreUnavailable as exc:
        raise AdminUnavailable(str(exc)) from exc
    except (InvalidArgument, AlreadyExists, NotFoundInMetastore, MetastoreConflict) as exc:
        raise AdminInputError(str(exc)) from exc
    except MetastoreError as exc:  # the database failed otherwise (a file that is not SQLite)
        raise AdminUnavailable(str(exc)) from exc


def with_metastore(command: Command) -> Command:
    """Add ``--metastore URL`` and ``--data DIR`` to ``command`` and call it with the opened
    store as its first argument; library errors exit with the documented codes."""

    @functools.wraps(command)
    def run(*args: Any, metastore_url: str | None, data: Path | None, **kwargs: Any) -> None:
        with opened_metastore(metastore_url, data) as store:
            command(store, *args, **kwargs)

    run = click.option(
        "--data",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="Control-plane data directory: use the SQLite metastore DIR/metastore.db.",
    )(run)
    return click.option(
        "--metastore",
        "metastore_url",
        metavar="URL",
        default=None,
        help="SQLAlchemy URL: sqlite:///PATH, postgresql+psycopg://... or mysql+pymysql://...",
    )(run)


def with_scope(command: Command) -> Command:
    """Add the arguments TENANT_ID PROJECT_ID ENVIRONMENT_ID and pass them on as one checked
    ``scope`` (a bad id exits 2 before the metastore is opened)."""

    @functools.wraps(command)
    def run(
        *args: Any, tenant_id: str, project_id: str, environment_id: str, **kwargs: Any
    ) -> None:
        try:
            scope = Scope(tenant_id, project_id, environment_id)
        except ValueError as exc:
            raise AdminInputError(str(exc)) from exc
        command(*args, scope=scope, **kwargs)

    for name in ("environment_id", "project_id", "tenant_id"):  # click reverses this order
        run = click.argument(name)(run)
    return run


def echo_json(document: dict[str, Any]) -> None:
    """Print one JSON object on stdout."""
    click.echo(json.dumps(document, sort_keys=True))


@click.group("admin")
def admin_group() -> None:
    """Administer the control-plane metastore: tenants, projects, environments, deployments
    and generations. Every command prints one JSON object on stdout.

    \b
    Example:
      baml-studio admin tenants create acme --data ./control

    \b
    Exit codes:
      0  success
      1  an unexpected internal error
      2  bad input: a usage error, an invalid id, something missing, existing or conflicting
      3  the metastore is unavailable (cannot be reached, is busy, or is a file this version
         cannot use as its database)
    """


@admin_group.group("tenants")
def tenants() -> None:
    """Tenants: the root authorization boundary (a Boundary customer organization).

    \b
    Example:
      baml-studio admin tenants list --data ./control
    """


@tenants.command("create")
@click.argument("tenant_id")
@click.option("--name", default=None, help="Display name.")
@with_metastore
def tenants_create(store: Metastore, tenant_id: str, name: str | None) -> None:
    """Create tenant TENANT_ID.

    \b
    Example:
      baml-studio admin tenants create acme --name "Acme Inc." --data ./control
    """
    echo_json(asdict(store.create_tenant(tenant_id, name)))


@tenants.command("list")
@with_metastore
def tenants_list(store: Metastore) -> None:
    """List every tenant as {"tenants": [...]}.

    \b
    Example:
      baml-studio admin tenants list --metastore postgresql+psycopg://postgres@db/meta
    """
    echo_json({"tenants": [asdict(record) for record in store.list_tenants()]})


@admin_group.group("projects")
def projects() -> None:
    """Projects of a tenant.

    \b
    Example:
      baml-studio admin projects create acme web --data ./control
    """


@projects.command("create")
@click.argument("tenant_id")
@click.argument("project_id")
@click.option("--name", default=None, help="Display name.")
@with_metastore
def projects_create(store: Metastore, tenant_id: str, project_id: str, name: str | None) -> None:
    """Create project PROJECT_ID of tenant TENANT_ID.

    \b
    Example:
      baml-studio admin projects create acme web --data ./control
    """
    echo_json(asdict(store.create_project(tenant_id, project_id, name)))


@projects.command("list")
@click.argument("tenant_id")
@with_metastore
def projects_list(store: Metastore, tenant_id: str) -> None:
    """List the projects of TENANT_ID as {"projects": [...]}.

    \b
    Example:
      baml-studio admin projects list acme --data ./control
    """
    echo_json({"projects": [asdict(record) for record in store.list_projects(tenant_id)]})


@admin_group.group("environments")
def environments() -> None:
    """Environments of a project: the scope of evidence, facts and tokens.

    \b
    Example:
      baml-studio admin environments create acme web prod --data ./control
    """


@environments.command("create")
@with_scope
@click.option("--name", default=None, help="Display name.")
@with_metastore
def environments_create(store: Metastore, scope: Scope, name: str | None) -> None:
    """Create an environment; its active generation is gen_1.

    \b
    Example:
      baml-studio admin environments create acme web prod --data ./control
    """
    record = store.create_environment(scope.tenant, scope.project, scope.environment, name)
    echo_json(asdict(record))


@environments.command("list")
@click.argument("tenant_id")
@click.option("--project", "project_id", default=None, help="Only this project's environments.")
@with_metastore
def environments_list(store: Metastore, tenant_id: str, project_id: str | None) -> None:
    """List the environments of TENANT_ID as {"environments": [...]}.

    \b
    Example:
      baml-studio admin environments list acme --project web --data ./control
    """
    records = store.list_environments(tenant_id, project_id)
    echo_json({"environments": [asdict(record) for record in records]})


@admin_group.group("deployments")
def deployments() -> None:
    """Data-plane deployments (BYOC: one tenant; Alien cell: several) and their environments.

    \b
    Example:
      baml-studio admin deployments assign dep-1 acme web prod --data ./control
    """


@deployments.command("create")
@click.argument("deployment_id")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in DeploymentKind]),
    required=True,
    help="byoc: in one tenant's cloud; alien: a Boundary-hosted cell serving several tenants.",
)
@click.option("--cell", required=True, help="The cell the deployment runs in.")
@click.option("--tenant", "tenant_id", default=None, help="Owning tenant (BYOC only).")
@with_metastore
def deployments_create(
    store: Metastore, deployment_id: str, kind: str, cell: str, tenant_id: str | None
) -> None:
    """Create deployment DEPLOYMENT_ID; a BYOC one needs --tenant, an Alien one takes none.

    \b
    Example:
      baml-studio admin deployments create dep-1 --kind byoc --cell eu1 --tenant acme --data d
    """
    record = store.create_deployment(deployment_id, DeploymentKind(kind), cell, tenant_id)
    echo_json({**asdict(record), "kind": record.kind.value})


@deployments.command("assign")
@click.argument("deployment_id")
@with_scope
@with_metastore
def deployments_assign(store: Metastore, deployment_id: str, scope: Scope) -> None:
    """Let DEPLOYMENT_ID serve an environment (a BYOC deployment: only its tenant's).

    \b
    Example:
      baml-studio admin deployments assign dep-1 acme web prod --data ./control
    """
    store.assign_environment(deployment_id, scope)
    served = store.deployment_environments(deployment_id)
    echo_json(
        {
            "deployment_id": deployment_id,
            "assigned": scope.as_dict(),
            "environments": [s.as_dict() for s in served],
        }
    )


@admin_group.group("generation")
def generation() -> None:
    """The active projection generation of an environment.

    \b
    Example:
      baml-studio admin generation show acme web prod --data ./control
    """


@generation.command("show")
@with_scope
@with_metastore
def generation_show(store: Metastore, scope: Scope) -> None:
    """Show the active generation and the history of an environment.

    \b
    Example:
      baml-studio admin generation show acme web prod --data ./control
    """
    history = store.generations(scope)
    active = next((record.generation for record in history if record.active), None)
    echo_json(
        {
            **scope.as_dict(),
            "active_generation": active,
            "generations": [
                {"generation": r.generation, "created_at": r.created_at, "active": r.active}
                for r in history
            ],
        }
    )


@generation.command("bump")
@with_scope
@with_metastore
def generation_bump(store: Metastore, scope: Scope) -> None:
    """Make a new generation active (gen_<n+1>): projection starts over in it.

    \b
    Example:
      baml-studio admin generation bump acme web prod --data ./control
    """
    echo_json({**scope.as_dict(), "active_generation": store.bump_generation(scope)})


def _open_registry(ctx: click.Context) -> Metastore:
    """The metastore of ``--metastore`` (else the one under ``--data``) for the ``tokens``
    commands, closed with the command's context."""
    url = ctx.params.get("metastore_url") or sqlite_url(
        ctx.params["data"].resolve() / "metastore.db"
    )
    store = Metastore.open(url)
    ctx.call_on_close(store.close)
    return store


def _register_token_commands() -> None:
    from baml_studio.cli_admin_tokens import register

    register(admin_group, _open_registry)


_register_token_commands()
