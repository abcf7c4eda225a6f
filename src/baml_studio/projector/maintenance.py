"""The sweep and the compaction of every scope, run once: what the projector service does on
its intervals (``loop.py``), for deployments with no long-running service (the Lambda
handler's :func:`~.lambda_handler.maintenance_handler` on an EventBridge schedule) or any
other scheduler.

:func:`sweep_scopes` sweeps each scope with evidence in the bucket (``sweep.discover_scopes``,
or the scopes given) with the projector's silence limit; :func:`compact_scopes` compacts the
private datasets of the same scopes with its version retention (``compact.compact``; scopes
without Lance datasets are skipped). One scope failing does not stop the others: its error is
reported (:class:`MaintenanceReport`) and the caller decides (the service logs it and tries at
the next interval; the Lambda handler fails the invocation after all ran, so the schedule's
retry and the function's error metric see it). Both are idempotent: a sweep closes only what
is still open, a compaction of a compacted scope does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from baml_studio.gateway.config import Scope
from baml_studio.projector.compact import CompactionReport, ScopeCompaction, compact
from baml_studio.projector.compact import discover_scopes as discover_lance_scopes
from baml_studio.projector.errors import ProjectorError
from baml_studio.projector.service import Projector
from baml_studio.projector.sweep import SweepReport, discover_scopes, sweep

log = logging.getLogger(__name__)

TASKS = ("sweep", "compact")


class MaintenanceIncomplete(ProjectorError):
    """A maintenance ran every scope but some failed (named); the next run retries them."""

    transient = True


@dataclass
class MaintenanceReport:
    sweeps: list[SweepReport] = field(default_factory=list)
    compaction: CompactionReport | None = None
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """``(task, scope, error)`` of every scope whose task failed."""

    def raise_for_failures(self) -> MaintenanceReport:
        """``self``, or :class:`MaintenanceIncomplete` naming every failed scope."""
        if self.failures:
            named = ", ".join(f"{task} {scope}: {error}" for task, scope, error in self.failures)
            raise MaintenanceIncomplete(f"maintenance incomplete: {named}")
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "sweep": [r.to_json() for r in self.sweeps],
            "compact": self.compaction.as_dict() if self.compaction is not None else None,
            "failed": [{"task": t, "scope": s, "error": e} for t, s, e in self.failures],
        }


def label(scope: Scope) -> str:
    return f"{scope.tenant}/{scope.project}/{scope.environment}"


OUT_OF_TIME = "not reached: the invocation's time ran out"

Stop = Callable[[], bool]
"""Asked before each scope: True when no scope should be started any more (a time limit)."""


def _ordered(scopes: Iterable[Scope], rotate: int) -> list[Scope]:
    """``scopes`` sorted, then rotated by ``rotate`` (so a run cut short by a time limit does
    not leave the same scopes behind every time)."""
    ordered = sorted(set(scopes))
    if not ordered:
        return ordered
    k = rotate % len(ordered)
    return ordered[k:] + ordered[:k]


def sweep_scopes(
    projector: Projector,
    scopes: Iterable[Scope] | None = None,
    *,
    now: float | None = None,
    report: MaintenanceReport | None = None,
    stop: Stop | None = None,
    rotate: int = 0,
) -> MaintenanceReport:
    """Sweep ``scopes`` (default: every scope with evidence in the bucket)."""
    report = report if report is not None else MaintenanceReport()
    config = projector.config
    moment = time.time() if now is None else now
    found = discover_scopes(projector.store) if scopes is None else scopes
    for scope in _ordered(found, rotate):
        if stop is not None and stop():
            report.failures.append(("sweep", label(scope), OUT_OF_TIME))
            continue
        try:
            result = sweep(
                projector.store,
                scope,
                projector.control,
                projector.private_store(scope),
                silence_limit_s=config.silence_limit_s,
                now=moment,
                config=config.worker,
            )
        except ProjectorError as exc:
            log.warning("sweep of %s failed: %s: %s", label(scope), type(exc).__name__, exc)
            report.failures.append(("sweep", label(scope), f"{type(exc).__name__}: {exc}"))
            continue
        report.sweeps.append(result)
        log.info(
            "sweep of %s: swept=%d pending=%d failed=%d",
            label(scope), len(result.swept), len(result.pending), len(result.failed),
        )  # fmt: skip
    return report


def compact_scopes(
    projector: Projector,
    scopes: Iterable[Scope] | None = None,
    *,
    report: MaintenanceReport | None = None,
    stop: Stop | None = None,
    rotate: int = 0,
) -> MaintenanceReport:
    """Compact ``scopes`` (default: every scope with evidence in the bucket, plus those
    ``compact.discover_scopes`` finds) with the configured version retention."""
    report = report if report is not None else MaintenanceReport()
    retention = timedelta(seconds=projector.config.version_retention_s)
    if scopes is None:
        scopes = {*discover_scopes(projector.store), *discover_lance_scopes(projector)}
    results: list[ScopeCompaction] = []
    for scope in _ordered(scopes, rotate):
        if stop is not None and stop():
            report.failures.append(("compact", label(scope), OUT_OF_TIME))
            continue
        results += compact(projector, [scope], retention).scopes
    report.compaction = CompactionReport(tuple(results))
    report.failures += [
        ("compact", label(s.scope), s.error or "") for s in report.compaction.failed
    ]
    return report


def run_maintenance(
    projector: Projector,
    tasks: Iterable[str] = TASKS,
    scopes: Iterable[Scope] | None = None,
    *,
    now: float | None = None,
    stop: Stop | None = None,
    rotate: int = 0,
) -> MaintenanceReport:
    """The ``tasks`` (:data:`TASKS`, in that order) over ``scopes`` (default: discovered),
    each in sorted order rotated by ``rotate``; once ``stop()`` is true the scopes not started
    are reported as failed (:data:`OUT_OF_TIME`)."""
    chosen = set(tasks)
    unknown = chosen - set(TASKS)
    if unknown:
        raise ValueError(f"unknown maintenance tasks {sorted(unknown)}; known: {list(TASKS)}")
    wanted = None if scopes is None else sorted(set(scopes))
    report = MaintenanceReport()
    if "sweep" in chosen:
        sweep_scopes(projector, wanted, now=now, report=report, stop=stop, rotate=rotate)
    if "compact" in chosen:
        compact_scopes(projector, wanted, report=report, stop=stop, rotate=rotate)
    return report
