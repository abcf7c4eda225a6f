"""``baml-studio sweep``: close executions whose stream stopped without ``RootEnded``.

A shell over :func:`baml_studio.projector.sweep.sweep` (behaviour and decisions there). Prints
one JSON summary on stdout. Exit codes (as every data-plane background command): 0 the sweep
ran (executions it could not close this round are listed under ``pending`` and ``failed``), 1
an internal error, 2 a usage error, 4 the bucket, Lance or the control plane is unavailable
(retry later).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from baml_studio.cli_projector_common import EXIT_UNAVAILABLE, opened, projector_options
from baml_studio.durations import parse_seconds
from baml_studio.gateway.config import Scope
from baml_studio.projector.errors import ProjectorError
from baml_studio.projector.service import ProjectorConfig
from baml_studio.projector.sweep import discover_scopes, sweep


class Duration(click.ParamType[float]):
    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_seconds(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ScopeType(click.ParamType[Scope]):
    name = "TENANT/PROJECT/ENV"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Scope:
        if isinstance(value, Scope):
            return value
        parts = str(value).split("/")
        if len(parts) != 3:
            self.fail(f"{value!r} is not TENANT/PROJECT/ENV", param, ctx)
        try:
            return Scope(*parts)
        except ValueError as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)


@click.command("sweep")
@projector_options
@click.option(
    "--silence",
    type=Duration(),
    default=None,
    help="Close streams silent for longer than this (e.g. 30m, 1h, 2d; "
    "default: the projector's silence limit, 1h).",
)
@click.option(
    "--scope",
    "scopes",
    type=ScopeType(),
    multiple=True,
    help="Sweep only this scope (repeatable; default: every scope under evidence/v1/).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be closed; write nothing.")
def sweep_command(
    config: ProjectorConfig, silence: float | None, scopes: tuple[Scope, ...], dry_run: bool
) -> None:
    """Close executions whose stream stopped without RootEnded as abandoned.

    Lists the streams of each scope, and for every stream whose last activity is older than
    the silence limit projects its executions with RootStarted and no RootEnded (status
    abandoned, index_state no_root_ended) into the control plane and Lance, as the projector
    does for ended ones. Safe to repeat. Prints one JSON summary.

    Example: baml-studio sweep --data ./dataplane --control-plane http://127.0.0.1:8700
    --token "$BAML_WORKLOAD_TOKEN" --silence 1h --scope tn_1/prj_1/env_1 --dry-run
    """
    silence_s = config.silence_limit_s if silence is None else silence
    now = time.time()
    with opened(config) as projector:
        try:
            targets = list(dict.fromkeys(scopes)) or discover_scopes(projector.store)
            reports = [
                sweep(
                    projector.store,
                    scope,
                    projector.control,
                    projector.private_store(scope),
                    silence_limit_s=silence_s,
                    now=now,
                    dry_run=dry_run,
                    config=config.worker,
                )
                for scope in targets
            ]
        except ProjectorError as exc:
            if exc.transient:
                click.echo(f"error: {type(exc).__name__}: {exc}; retry later", err=True)
                raise SystemExit(EXIT_UNAVAILABLE) from exc
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    summary = {
        "now": now,
        "silence_s": silence_s,
        "dry_run": dry_run,
        "swept": sum(len(r.swept) for r in reports),
        "pending": sum(len(r.pending) for r in reports),
        "failed": sum(len(r.failed) for r in reports),
        "scopes": [r.to_json() for r in reports],
    }
    click.echo(json.dumps(summary, sort_keys=True))
