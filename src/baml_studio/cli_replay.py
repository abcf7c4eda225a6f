"""``baml-studio replay``: re-notify the projector of evidence whose projection is missing
(a shell over :mod:`baml_studio.projector.replay`)."""

from __future__ import annotations

import json
from typing import Any

import click

from baml_studio.cli_projector_common import EXIT_UNAVAILABLE, opened, projector_options
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.projector.errors import ControlPlaneRefused
from baml_studio.projector.replay import (
    ReplayError,
    ReplayPlan,
    delete_private_datasets,
    plan_rebuild,
    plan_replay,
    projected_state,
    replay,
    replay_dead_letters,
)
from baml_studio.projector.service import Projector, ProjectorConfig, scope_root

EXIT_USAGE = 2
DEAD_LETTER_WAIT_S = 1.0


def parse_scope(text: str) -> Scope:
    """``TENANT/PROJECT/ENVIRONMENT`` as a :class:`Scope`; ``ValueError`` otherwise."""
    parts = text.split("/")
    if len(parts) != 3:
        raise ValueError(f"a scope is TENANT/PROJECT/ENVIRONMENT, got {text!r}")
    return Scope(*parts)


def _scopes_option(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[Scope, ...]:
    try:
        return tuple(parse_scope(value) for value in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


@click.command("replay")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    metavar="T/P/E",
    callback=_scopes_option,
    help="TENANT/PROJECT/ENVIRONMENT to replay (repeatable; default: every environment in "
    "DATA/environments.json).",
)
@click.option(
    "--dead-letters",
    is_flag=True,
    help="Only move every message of the dead-letter queue back to the projection queue.",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Enqueue every meta object and pack regardless of state (a rebuild).",
)
@click.option(
    "--lance-rebuild",
    is_flag=True,
    help="Delete the scope's Lance datasets, then enqueue everything (implies --all).",
)
@click.option("--dry-run", is_flag=True, help="Plan and print; enqueue and delete nothing.")
@projector_options
def replay_command(
    config: ProjectorConfig,
    scopes: tuple[Scope, ...],
    dead_letters: bool,
    everything: bool,
    lance_rebuild: bool,
    dry_run: bool,
) -> None:
    """Enqueue synthetic S3 notifications for meta objects and value packs whose projection
    is missing, and print a JSON summary (counts per kind).

    A meta object is missing when one of its RootEnded executions is not projected in
    ClickHouse (active generation) or in Lance (projected_v1); a pack when one of its values
    is not in values_v1. Packs go first. Corrupt objects are listed, not enqueued.

    \b
    Example:
      baml-studio replay --data ./dataplane --control-plane http://127.0.0.1:8700 \\
          --token "$BAML_WORKLOAD_TOKEN" --scope acme/web/prod --dry-run

    \b
    Procedures:
      missed notifications   baml-studio replay --data D --control-plane URL
      after a fix            baml-studio replay --data D --control-plane URL --dead-letters
      ClickHouse lost        baml-studio admin generation bump acme web prod --data ./control
                             baml-studio replay ... --scope acme/web/prod --all
      Lance lost             stop the scope's projector, then
                             baml-studio replay ... --scope acme/web/prod --lance-rebuild
                             (or delete DATA/derived/v1/acme/web/prod yourself and use --all)
    Run the projector (baml-studio projector) to work through what was enqueued.

    \b
    Exit codes:
      0  done (corrupt objects, if any, are listed in the summary)
      1  an unexpected internal error
      2  usage error, or the control plane refused the token or scope
      4  the bucket, the queue, Lance or the control plane is unavailable; rerun later
    """
    if dead_letters and (everything or lance_rebuild or scopes):
        raise click.UsageError("--dead-letters moves the dead-letter queue only; run it alone")
    with opened(config) as projector:
        try:
            if dead_letters:
                summary = _dead_letters(projector, dry_run)
            else:
                targets = scopes or _provisioned(config)
                summary = _scopes(projector, targets, everything, lance_rebuild, dry_run)
        except (ControlPlaneRefused, ReplayError) as exc:
            raise _Failure(str(exc), EXIT_USAGE) from exc
        except BamlStudioError as exc:
            raise _Failure(f"{type(exc).__name__}: {exc}", EXIT_UNAVAILABLE) from exc
    click.echo(json.dumps(summary, indent=2, sort_keys=True))


def _provisioned(config: ProjectorConfig) -> tuple[Scope, ...]:
    scopes = EnvironmentsFile(config.dataplane.environments_path).scopes()
    if not scopes:
        raise click.UsageError(
            f"no environment in {config.dataplane.environments_path}; give --scope T/P/E"
        )
    return tuple(sorted(scopes, key=lambda s: (s.tenant, s.project, s.environment)))


def _dead_letters(projector: Projector, dry_run: bool) -> dict[str, Any]:
    if dry_run:
        held = projector.queue.dead_letter_queue().approximate_count()
        return {"dry_run": True, "dead_letters": {"held": held, "moved": 0}}
    moved = replay_dead_letters(projector.queue, wait_s=DEAD_LETTER_WAIT_S)
    return {"dry_run": False, "dead_letters": {"moved": moved}}


def _scopes(
    projector: Projector,
    scopes: tuple[Scope, ...],
    everything: bool,
    lance_rebuild: bool,
    dry_run: bool,
) -> dict[str, Any]:
    reports = []
    totals = {"pack": 0, "meta": 0}
    for scope in scopes:
        report = _one_scope(projector, scope, everything, lance_rebuild, dry_run)
        for kind in totals:
            totals[kind] += report["enqueued"][kind]
        reports.append(report)
    return {"dry_run": dry_run, "enqueued": totals, "scopes": reports}


def _one_scope(
    projector: Projector, scope: Scope, everything: bool, lance_rebuild: bool, dry_run: bool
) -> dict[str, Any]:
    name = f"{scope.tenant}/{scope.project}/{scope.environment}"
    click.echo(f"planning {name}", err=True)
    private = projector.private_store(scope)
    extra: dict[str, Any] = {}
    if lance_rebuild:
        root = scope_root(projector.config, scope)
        if dry_run:
            extra["lance_deleted"] = sorted(private.version())
        else:
            extra["lance_deleted"] = list(delete_private_datasets(root, projector.store))
        extra["lance_root"] = root
    plan: ReplayPlan
    if everything or lance_rebuild:
        plan = plan_rebuild(projector.store, scope)
    else:
        state = projected_state(
            projector.control,
            private,
            scope,
            catalog_version=projector.config.worker.catalog_version,
        )
        extra["generation"] = state.generation
        extra["projected"] = {"clickhouse": len(state.clickhouse), "lance": len(state.lance)}
        plan = plan_replay(
            projector.store,
            scope,
            projected_roots=state.both,
            ingested_cids=private.missing_values,
        )
    enqueued = {"pack": 0, "meta": 0}
    if not dry_run:
        replay(plan, projector.queue)
        enqueued = {"pack": len(plan.packs), "meta": len(plan.metas)}
    click.echo(f"{name}: {len(plan.packs)} packs, {len(plan.metas)} meta objects", err=True)
    return {**plan.summary(), **extra, "enqueued": enqueued}


class _Failure(click.ClickException):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code

    @property
    def exit_code(self) -> int:  # type: ignore[override]  # reason: per-instance exit code
        return self.code


__all__ = ["parse_scope", "replay_command"]
