"""``baml-studio projector`` and ``baml-studio compact``: thin shells over
:mod:`baml_studio.projector.loop` and :mod:`baml_studio.projector.compact`.

Register with ``main.add_command(projector_command)`` and ``main.add_command(compact_command)``.
Both take the options of :mod:`baml_studio.cli_projector_common` (``--data``,
``--control-plane``, ``--token`` or ``$BAML_WORKLOAD_TOKEN``, ``--derived``).

The service runs the sweep of every scope every ``sweep_interval_s`` with ``silence_limit_s``
(:func:`sweep_hook`), and the compaction
of every scope every ``compact_interval_s`` with ``version_retention_s`` (``ProjectorConfig``).

Exit codes: 0 success (``projector``: stopped by SIGTERM or SIGINT, or ``--once`` drained what
was visible; messages retried or quarantined are normal outcomes); 1 internal error; 2 usage
error; 4 a store, the queue or the control plane is unavailable (``compact``: a scope's
compaction failed; the report names it).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import signal
import threading
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any

import click

from baml_studio.cli_projector_common import EXIT_UNAVAILABLE, opened, projector_options
from baml_studio.format.errors import BamlStudioError
from baml_studio.projector.maintenance import MaintenanceReport, sweep_scopes
from baml_studio.projector.service import Projector, ProjectorConfig
from baml_studio.servergc import tuned_for_serving

log = logging.getLogger(__name__)

SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def sweep_hook(projector: Projector) -> Callable[[], object]:
    """The sweep of every scope with evidence (:func:`~.maintenance.sweep_scopes`) with the
    projector's silence limit. A scope whose sweep fails does not stop the others; the failures
    are raised together once all ran (``MaintenanceIncomplete``: the service logs it and
    sweeps again at the next interval)."""

    def sweep_all() -> MaintenanceReport:
        return sweep_scopes(projector).raise_for_failures()

    return sweep_all


def compaction_hook(projector: Projector) -> Callable[[], object]:
    """Compaction of every discovered scope with the configured version retention."""
    from baml_studio.projector.compact import compact

    retention = timedelta(seconds=projector.config.version_retention_s)
    return functools.partial(compact, projector, None, retention)


@click.command("projector")
@projector_options
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker threads handling messages.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes, each with --workers threads (the work is mostly Python: one process "
    "uses about one core); this one also runs the sweep and the compaction.",
)
@click.option(
    "--once", is_flag=True, help="Drain the messages visible now, print the counts and exit."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 600),
    callback=lambda _ctx, _param, value: _finite(value),
    default=None,
    help="Long-poll wait in seconds (default 10, or 1 with --once); a stop takes at most this.",
)
def projector_command(
    config: ProjectorConfig, workers: int, processes: int, once: bool, wait_s: float | None
) -> None:
    """Project bucket notifications from the queue: public facts to the control plane,
    private rows to Lance. Runs until SIGTERM or Ctrl-C (a second one ends it at once; every
    step is safe to redo), with the sweep and the compaction on their intervals, then prints
    the counts as JSON; --once drains what is visible and prints the counts.

    Example: baml-studio projector --data ./dataplane --control-plane http://127.0.0.1:8700
    --token "$BAML_WORKLOAD_TOKEN" --workers 2 --processes 2
    """
    from baml_studio.projector.loop import LoopReport, run_projector
    from baml_studio.projector.processes import check_processes, run_processes

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        check_processes(config, processes)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--processes") from exc
    stop = threading.Event()
    wait = (1 if once else 10) if wait_s is None else wait_s
    with opened(config) as projector, tuned_for_serving():  # a serving process's collector

        def run_here() -> LoopReport:
            if once:
                return run_projector(projector, stop=stop, workers=workers, wait_s=wait, once=True)
            return run_projector(
                projector,
                stop=stop,
                workers=workers,
                wait_s=wait,
                sweep=sweep_hook(projector),
                compact=compaction_hook(projector),
            )

        def run() -> dict[str, int]:
            try:
                if processes == 1:
                    return run_here().as_dict()
                return run_processes(
                    config,
                    stop=stop,
                    processes=processes,
                    workers=workers,
                    wait_s=wait,
                    once=once,
                    run_here=run_here,
                ).as_dict()
            except BamlStudioError as exc:
                click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
                raise SystemExit(EXIT_UNAVAILABLE) from exc

        if once:
            click.echo(json.dumps(run(), sort_keys=True))
            return
        previous = _on_stop_signals(stop)
        try:
            click.echo(
                f"projector: {processes} process(es) of {workers} worker(s); SIGTERM or Ctrl-C "
                "to stop",
                err=True,
            )
            counts = run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        click.echo(json.dumps(counts, sort_keys=True))


@click.command("compact")
@projector_options
@click.option(
    "--retention",
    default="7d",
    show_default=True,
    help="Keep Lance versions younger than this (s, m, h, d, w); queries bind recent versions.",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    metavar="TENANT/PROJECT/ENV",
    help="Compact only this scope (repeatable; default: every scope found).",
)
def compact_command(config: ProjectorConfig, retention: str, scopes: tuple[str, ...]) -> None:
    """Compact the private Lance datasets: fold small fragments, build the scalar indexes and
    remove versions older than --retention, for every scope (the provisioned environments
    and the scope directories of a local derived root) or the --scope ones. The control plane
    is not contacted. Prints a JSON report.

    Example: baml-studio compact --data ./dataplane --control-plane http://127.0.0.1:8700
    --token "$BAML_WORKLOAD_TOKEN" --retention 7d
    """
    from baml_studio.projector.compact import compact, parse_duration, parse_scope

    try:
        keep = parse_duration(retention)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retention") from exc
    try:
        chosen = [parse_scope(s) for s in scopes]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--scope") from exc
    with opened(config) as projector:
        try:
            report = compact(projector, chosen or None, keep)
        except BamlStudioError as exc:
            click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
            raise SystemExit(EXIT_UNAVAILABLE) from exc
    click.echo(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    if report.failed:
        click.echo(f"error: {len(report.failed)} scope(s) failed (see the report)", err=True)
        raise SystemExit(EXIT_UNAVAILABLE)


def _on_stop_signals(stop: threading.Event) -> dict[signal.Signals, SignalHandler]:
    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once

    return {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}


def _finite(value: float | None) -> float | None:
    """``FloatRange`` lets ``nan`` through (no comparison is true of it)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param_hint="'--wait'")
    return value
