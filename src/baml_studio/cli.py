"""The ``baml-studio`` command: a thin shell over the library.

Exit codes (``query`` and ``jobs`` have their own, in :mod:`baml_studio.cli_query`; ``publish``,
``erase``, ``setup s3-notifications`` and ``admin`` give 1, 3 and 5 meanings of their own, in
their modules):
    0  success
    1  an unexpected internal error
    2  usage error (bad option or argument)
    3  the store holds corrupt or unreadable files (``store check``)
    4  a store, queue, port or service the command needs is in use or unavailable
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from baml_studio.cli_admin import admin_group
from baml_studio.cli_control import serve_control
from baml_studio.cli_erase import erase_command
from baml_studio.cli_gateway import serve as serve_group
from baml_studio.cli_gateway import setup as setup_group
from baml_studio.cli_gateway import tokens as tokens_group
from baml_studio.cli_jobs import jobs as jobs_group
from baml_studio.cli_paths import require_store
from baml_studio.cli_projector import compact_command, projector_command
from baml_studio.cli_publish import publish as publish_command
from baml_studio.cli_query import query as query_command
from baml_studio.cli_replay import replay_command
from baml_studio.cli_sweep import sweep_command
from baml_studio.cli_up import up as up_command
from baml_studio.format.ids import euid_hex
from baml_studio.store import StoreError, StoreInUse, StoreReader, clean_profiles_v1
from baml_studio.store.config import resolve_store_root
from baml_studio.store.errors import InvalidStoreRoot

EXIT_CORRUPT = 3
EXIT_UNAVAILABLE = 4


def _named_path(_ctx: click.Context, _param: click.Parameter, value: str) -> Path:
    """``value`` as a path; an empty one is a usage error (click's ``Path`` type made it ``.``,
    and ``demo --store ""`` wrote its store into the current directory)."""
    if not value:
        raise click.BadParameter("is empty: name a directory")
    return Path(value)


def _store_root(store: Path | None) -> Path:
    return store if store is not None else resolve_store_root(Path.cwd(), os.environ)


STORE_OPTION = click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profiles-v1 store directory (default: $BAML_PROFILE_DIR or ./.baml/profiles-v1).",
)


@click.group()
@click.version_option(package_name="baml-studio")
def main() -> None:
    """baml-studio: record BAML calls into a local store, and inspect it.

    Example: baml-studio demo --store demo-store --executions 1000
    """


@main.command()
@click.option(
    "--store",
    type=click.Path(file_okay=False),
    required=True,
    callback=_named_path,
    help="Store directory to write (created if missing).",
)
@click.option(
    "--executions",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Number of root executions to run.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Number of OS processes (one profiler stream each).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed.")
@click.option(
    "--report",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write what the workload generated (JSON) to this file.",
)
def demo(store: Path, executions: int, processes: int, seed: int, report: Path | None) -> None:
    """Run the synthetic BAML workload through the real profiler into STORE.

    Example: baml-studio demo --store demo-store --executions 1000 --processes 2 --seed 7
    """
    from baml_studio.format.errors import BamlStudioError
    from baml_studio.workload import run_workload

    if report is not None and not report.parent.is_dir():
        raise click.BadParameter(f"{report.parent} is not a directory", param_hint="'--report'")
    try:
        result = run_workload(store, executions=executions, processes=processes, seed=seed)
    except (BamlStudioError, OSError) as exc:  # the store cannot be made or written
        click.echo(f"error: cannot run the workload into {store}: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    if report is not None:
        report.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    by_status = Counter(e.status for e in result.executions)
    click.echo(
        f"ran {len(result.executions)} executions in {processes} process(es) into {store}: "
        + ", ".join(f"{count} {status}" for status, count in sorted(by_status.items()))
    )


main.add_command(query_command)
main.add_command(jobs_group)
main.add_command(publish_command)
serve_group.add_command(serve_control)
main.add_command(serve_group)
main.add_command(tokens_group)
main.add_command(setup_group)
main.add_command(admin_group)
main.add_command(projector_command)
main.add_command(compact_command)
main.add_command(replay_command)
main.add_command(sweep_command)
main.add_command(erase_command)
main.add_command(up_command)


@main.group()
def store() -> None:
    """Inspect and maintain a local profiles-v1 store."""


def _scan_summary(root: Path) -> tuple[dict[str, Any], bool]:
    reader = StoreReader(root)
    scan = reader.scan()
    cas = reader.check_cas()
    statuses: Counter[str] = Counter()
    incomplete = 0
    for execution in scan.executions:
        if execution.ended is None or execution.started is None:
            incomplete += 1
        statuses[execution.ended.status.name.lower() if execution.ended else "running"] += 1
    by_path: dict[
        str, tuple[str, str]
    ] = {}  # the scan decodes CAS files too: a file check_cas also flags is listed once
    for c in (*scan.corruptions, *cas.corruptions):
        by_path.setdefault(str(c.path), (type(c.error).__name__, str(c.error)))
    corruptions = [
        {"path": path, "error": error, "message": message}
        for path, (error, message) in by_path.items()
    ]
    summary = {
        "store": str(root),
        "streams": [
            {
                "stream_id": euid_hex(s.euid),
                "alive": s.alive,
                "meta_high_water": s.meta_high_water,
                "data_high_water": s.data_high_water,
                "meta_gaps": [list(g) for g in s.meta_gaps],
                "data_gaps": [list(g) for g in s.data_gaps],
            }
            for s in scan.streams
        ],
        "executions": len(scan.executions),
        "executions_missing_start_or_end": incomplete,
        "statuses": dict(sorted(statuses.items())),
        "cas_objects": cas.objects,
        "corruptions": corruptions,
    }
    return summary, not corruptions


@store.command("check")
@STORE_OPTION
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def store_check(store: Path | None, fmt: str) -> None:
    """Verify every file's checksum and decode it; list streams, executions and corruption.

    Exits 3 when any file is corrupt. Example: baml-studio store check --store demo-store
    """
    root = _store_root(store)
    require_store(root, EXIT_UNAVAILABLE)
    try:
        summary, clean = _scan_summary(root)
    except StoreError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(f"store {summary['store']}")
        click.echo(f"  streams: {len(summary['streams'])}")
        click.echo(f"  executions: {summary['executions']} {summary['statuses']}")
        click.echo(
            f"  without RootStarted or RootEnded: {summary['executions_missing_start_or_end']}"
        )
        click.echo(f"  CAS objects: {summary['cas_objects']}")
        click.echo(f"  corrupt files: {len(summary['corruptions'])}")
        for item in summary["corruptions"]:
            click.echo(f"    {item['path']}: {item['error']}: {item['message']}")
    if not clean:
        sys.exit(EXIT_CORRUPT)


@store.command("clean")
@STORE_OPTION
def store_clean(store: Path | None) -> None:
    """Remove a .baml/profiles-v1 store (refused while any profiler or reader holds it).

    Example: baml-studio store clean --store .baml/profiles-v1
    """
    root = _store_root(store)
    try:
        clean_profiles_v1(root)
    except InvalidStoreRoot as exc:  # only a directory named .baml/profiles-v1 is removed
        raise click.BadParameter(str(exc), param_hint="'--store'") from exc
    except StoreInUse as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except StoreError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    click.echo(f"removed {root}")


if __name__ == "__main__":
    main()
