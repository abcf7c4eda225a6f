"""Binding one snapshot per query (system-contract "Snapshot semantics").

A :class:`BoundSnapshot` is what every resident subquery and every Lance read of one query uses:
the control plane's ``snapshot_id``/``generation``/``catalog_version`` (from
``POST /query-snapshots``, cached per scope until shortly before ``expires_at``) and the Lance
versions of the scope's private datasets read from the bucket at bind time.

``lance_version`` is the version of ``projected_v1``, the marker dataset the projector commits
*last*: an execution whose marker is in it has every private row in the datasets' versions read
after it. The other datasets' versions are read after the marker's, so they hold at least those
rows; rows of executions that are not in the marker set are ignored (their facts are ``pending``).

Binding also writes a version lease over the bound versions for the query's wall budget
(:mod:`baml_studio.projector.version_leases`), so compaction keeps them while the query reads
them however old they are; a lease that cannot be written refuses the query (``LeaseUnavailable``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.lance_store import DATASETS, PROJECTED, PrivateStore

EXPIRY_MARGIN_S = 5.0
"""A cached control-plane snapshot is reused until this long before its ``expires_at``."""


@dataclass(frozen=True, slots=True)
class BoundSnapshot:
    scope: Scope
    snapshot_id: str
    generation: str
    catalog_version: str
    expires_at: float
    """Unix seconds after which the control plane refuses the ``snapshot_id``."""
    lance_version: int
    """Version of ``projected_v1`` (0: nothing projected yet)."""
    dataset_versions: dict[str, int] = field(default_factory=dict)
    """Version of every private dataset that existed at bind time."""

    def to_json(self) -> dict[str, Any]:
        """The ``QueryExecutionSnapshot`` object."""
        return {
            "snapshotId": self.snapshot_id,
            "catalogVersion": self.catalog_version,
            "generation": self.generation,
            "lanceVersion": self.lance_version,
        }


class SnapshotBinder:
    """Binds snapshots; the control plane's part is cached per (scope, catalog version)."""

    def __init__(
        self,
        control: ControlClient,
        private_store: Callable[[Scope], PrivateStore],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._control = control
        self._private_store = private_store
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[tuple[Scope, str], dict[str, Any]] = {}
        self.control_calls = 0

    def bind(self, scope: Scope, catalog_version: str, *, hold_s: float = 0.0) -> BoundSnapshot:
        """The snapshot of a query that may read it for ``hold_s`` seconds (its lease)."""
        control = self._control_snapshot(scope, catalog_version)
        store = self._private_store(scope)
        marker = store.version((PROJECTED,)).get(PROJECTED, 0)
        # read every other dataset after the marker: they hold at least the marked rows
        bound = store.version(tuple(name for name in DATASETS if name != PROJECTED))
        bound[PROJECTED] = marker
        store.leases.hold(bound, hold_s)
        return BoundSnapshot(
            scope,
            str(control["snapshot_id"]),
            str(control["generation"]),
            str(control.get("catalog_version", catalog_version)),
            _unix(control.get("expires_at")),
            marker,
            bound,
        )

    def renew(self, snapshot: BoundSnapshot, hold_s: float) -> None:
        """Lease ``snapshot``'s versions for ``hold_s`` more seconds from now (a queued
        background job keeps its snapshot so while it waits, and once more when it starts)."""
        self._private_store(snapshot.scope).leases.hold(snapshot.dataset_versions, hold_s)

    def _control_snapshot(self, scope: Scope, catalog_version: str) -> dict[str, Any]:
        key = (scope, catalog_version)
        now = self._clock()
        with self._lock:
            hit = self._cached.get(key)
        if hit is not None and _unix(hit.get("expires_at")) - EXPIRY_MARGIN_S > now:
            return hit
        fresh = self._control.snapshot(scope, catalog_version)
        with self._lock:
            self.control_calls += 1
            self._cached[key] = fresh
        return fresh


def _unix(text: object) -> float:
    if not isinstance(text, str):
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
