"""Lance maintenance for every scope: compaction, scalar indexes, old versions
(``baml-studio compact``, and the service every ``compact_interval_s``).

``compact(projector, scopes, retention)`` runs :meth:`PrivateStore.compact` on the private
datasets of each scope: small fragments folded together, the scalar indexes of
``lance_store.INDEXES`` built or extended, and versions older than ``retention`` removed,
except those a running query has bound (its version lease, :mod:`.version_leases`) and
versions superseded less than ``lance_store.SUPERSEDED_GRACE`` ago. A scope without Lance
datasets is skipped (nothing is created for it).

Scopes, when not given: the data plane's provisioned environments (``DIR/environments.json``)
and, for a local derived root, every ``<tenant>/<project>/<environment>`` directory under it.
On S3 the derived root is not listed (an object listing walks every data file): scopes come
from ``environments.json`` or the caller.

One scope failing (``LanceCommitFailed`` on a conflict or I/O, ``PrivateStoreUnavailable``) does
not stop the others: the report names it, and the next run tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from baml_studio.durations import parse_seconds
from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.projector.errors import ProjectorError
from baml_studio.projector.lance_store import DatasetCompaction
from baml_studio.projector.service import Projector

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class ScopeCompaction:
    scope: Scope
    root_uri: str
    """Where the scope's datasets are."""

    datasets: tuple[DatasetCompaction, ...] = ()
    """What each dataset's compaction did (empty when skipped or failed)."""

    skipped: bool = False
    """The scope has no Lance dataset yet."""

    error: str | None = None
    """Why the compaction failed (the error type and message), else ``None``."""

    leases_live: int = 0
    """Live version leases (running queries' bound versions) whose versions were kept."""

    leases_malformed: tuple[str, ...] = ()
    """Lease files that could not be decoded (ignored, left for an operator)."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    scopes: tuple[ScopeCompaction, ...]

    @property
    def failed(self) -> tuple[ScopeCompaction, ...]:
        return tuple(s for s in self.scopes if s.error is not None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: per scope its id parts, root, per-dataset metrics, skipped and error."""
        return {
            "scopes": [
                {
                    **s.scope.as_dict(),
                    "root_uri": s.root_uri,
                    "skipped": s.skipped,
                    "error": s.error,
                    "leases_live": s.leases_live,
                    "leases_malformed": list(s.leases_malformed),
                    "datasets": [asdict(d) for d in s.datasets],
                }
                for s in self.scopes
            ],
            "failed": len(self.failed),
        }


def parse_duration(text: str) -> timedelta:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"`` or plain seconds (``"3600"``): the
    grammar of :mod:`baml_studio.durations`."""
    seconds = parse_seconds(text)
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long") from None


def parse_scope(text: str) -> Scope:
    """``"tenant/project/environment"`` as a :class:`Scope` (``ValueError`` naming the rule)."""
    parts = text.split("/")
    if len(parts) != 3:
        raise ValueError(f"scope {text!r} is not tenant/project/environment")
    return Scope(*parts)


def discover_scopes(projector: Projector) -> list[Scope]:
    """The provisioned environments, and the scope directories under a local derived root."""
    config = projector.config
    found = set(EnvironmentsFile(config.dataplane.environments_path).scopes())
    root = config.root()
    if "://" not in root or root.startswith("file://"):
        base = Path(root.removeprefix("file://"))
        for path in sorted(base.glob("*/*/*")):
            if not path.is_dir():
                continue
            try:
                found.add(Scope(*path.relative_to(base).parts))
            except ValueError:
                log.warning("ignoring %s: not a tenant/project/environment directory", path)
    return sorted(found)


def compact(
    projector: Projector,
    scopes: Iterable[Scope] | None = None,
    retention: timedelta = DEFAULT_RETENTION,
    *,
    now: datetime | None = None,
) -> CompactionReport:
    """Compact the private datasets of ``scopes`` (default :func:`discover_scopes`)."""
    targets = sorted(set(scopes)) if scopes is not None else discover_scopes(projector)
    results = [_compact_scope(projector, scope, retention, now) for scope in targets]
    report = CompactionReport(tuple(results))
    log.info(
        "compaction: %d scope(s), %d skipped, %d failed",
        len(results),
        sum(r.skipped for r in results),
        len(report.failed),
    )
    return report


def _compact_scope(
    projector: Projector, scope: Scope, retention: timedelta, now: datetime | None
) -> ScopeCompaction:
    store = projector.private_store(scope)
    label = f"{scope.tenant}/{scope.project}/{scope.environment}"
    try:
        if not store.version():
            return ScopeCompaction(scope, store.root_uri, skipped=True)
        result = store.compact(retention, now=now)
    except ProjectorError as exc:
        log.warning("compaction of %s failed: %s: %s", label, type(exc).__name__, exc)
        return ScopeCompaction(scope, store.root_uri, error=f"{type(exc).__name__}: {exc}")
    for d in result.datasets:
        log.info(
            "compacted %s %s: version %d->%d fragments -%d +%d indexes %s versions removed %d",
            label,
            d.name,
            d.version_before,
            d.version_after,
            d.fragments_removed,
            d.fragments_added,
            list(d.indexes_created),
            d.versions_removed,
        )
    if result.leases_malformed:
        log.warning("%s: malformed version leases %s", label, list(result.leases_malformed))
    return ScopeCompaction(
        scope,
        store.root_uri,
        result.datasets,
        leases_live=result.leases_live,
        leases_malformed=result.leases_malformed,
    )
