"""Selectors to streams, through the public facts first (system contract, "Erasure").

Every read is a resident query of ``threads_v1`` at the scope's active generation (its
``process_id`` column is the stream's euid, 32 hex), paged by key or run over chunks of at most
:data:`IN_CHUNK` parameters:

* ``process_euids``: each euid must be a stream of this scope: it has facts, objects under
  ``evidence/v1/<scope>/streams/<euid>/``, or an earlier erasure of this scope resolved to it
  (``known``: so an erasure that failed part-way can be requested again). Any other (another
  tenant's stream, a typo) is refused with 400 ``unknown_stream`` and nothing is created.
* ``execution_ids``: the ``process_id`` of each id's facts. An id without facts (not projected
  yet) still resolves when it is a thread wire id whose euid has objects in this scope's bucket
  or is ``known`` (the euid is part of every thread id); any other is refused with 400
  ``unknown_execution``.
* ``time_range``: every stream with a root thread whose ``started_at`` or ``ended_at`` lies in
  ``[start, end)``. Executions not yet projected are not seen (the facts are the index).

Failures of the control plane become 503 (``control_plane_unavailable``, or
``control_plane_refused`` for a refusal of the data plane's own request), except a 403 for the
scope: the data plane's workload token does not serve the user's environment, which is 403
``scope_not_served``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from baml_studio.apierrors import BadRequest, DependencyUnavailable, Forbidden
from baml_studio.erasure.selector import Selector, rfc3339
from baml_studio.format.ids import InvalidWireId, ThreadRef
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.objectstore.errors import ObjectStoreError
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import ControlPlaneRefused, ControlPlaneUnavailable
from baml_studio.projector.resident_client import ResidentBudget, resident_query

IN_CHUNK = 200
"""Parameters per ``IN (…)`` list of one resident query."""
PAGE_ROWS = 50_000
_SHOWN = 10


class Resolver:
    """Resolves selectors of any scope with the data plane's control client and bucket."""

    def __init__(
        self,
        control: ControlClient,
        objects: ObjectStore,
        known: Callable[[Scope], set[str]] | None = None,
    ) -> None:
        self._control = control
        self._objects = objects
        self._known = known or (lambda scope: set())

    def resolve(self, scope: Scope, selector: Selector) -> tuple[str, ...]:
        """The sorted euids ``selector`` erases in ``scope`` (400/503 as the module doc says)."""
        try:
            if selector.kind == "process_euids":
                return self._euids(scope, selector.items)
            if selector.kind == "execution_ids":
                return self._executions(scope, selector.items)
            return self._time_range(scope, selector)
        except ControlPlaneUnavailable as exc:
            raise DependencyUnavailable(
                f"the control plane did not answer while resolving the selector: {exc}",
                code="control_plane_unavailable",
            ) from exc
        except ControlPlaneRefused as exc:
            if exc.status == 403:
                raise Forbidden(
                    f"this data plane does not serve {_show(scope)}: the control plane refused "
                    f"its workload token for that scope ({exc}); erase through the data plane "
                    "that holds the scope's evidence",
                    code="scope_not_served",
                ) from exc
            raise DependencyUnavailable(
                f"the control plane refused the data plane's resident query: {exc}",
                code="control_plane_refused",
            ) from exc

    def fact_roots(self, scope: Scope, streams: Sequence[str]) -> set[str]:
        """Every execution id with facts of ``streams`` at the active generation."""
        generation = self._generation(scope)
        roots: set[str] = set()
        for chunk in _chunks(streams):
            marks = _marks(2, len(chunk))
            sql = (
                f"SELECT DISTINCT execution_id FROM threads_v1 WHERE process_id IN ({marks}) "
                f"AND execution_id > $1 ORDER BY execution_id LIMIT {PAGE_ROWS}"
            )
            roots.update(str(r[0]) for r in self._paged(scope, generation, sql, chunk))
        return roots

    # --- the three selectors -------------------------------------------------------------------

    def _euids(self, scope: Scope, euids: Sequence[str]) -> tuple[str, ...]:
        generation = self._generation(scope)
        known: set[str] = set()
        for chunk in _chunks(euids):
            sql = (
                "SELECT DISTINCT process_id FROM threads_v1 "
                f"WHERE process_id IN ({_marks(1, len(chunk))})"
            )
            known.update(str(r[0]) for r in self._rows(scope, generation, sql, chunk))
        known |= self._known(scope)
        unknown = [e for e in euids if e not in known and not self._has_objects(scope, e)]
        if unknown:
            raise BadRequest(
                f"{len(unknown)} process euid(s) name no stream of {_show(scope)}: "
                f"{unknown[:_SHOWN]}; list only streams of this tenant, project and environment",
                code="unknown_stream",
                details={"process_euids": unknown[:100]},
            )
        return tuple(sorted(set(euids)))

    def _executions(self, scope: Scope, ids: Sequence[str]) -> tuple[str, ...]:
        generation = self._generation(scope)
        found: dict[str, str] = {}
        for chunk in _chunks(ids):
            sql = (
                "SELECT DISTINCT execution_id, process_id FROM threads_v1 "
                f"WHERE execution_id IN ({_marks(1, len(chunk))}) AND process_id IS NOT NULL"
            )
            found.update((str(r[0]), str(r[1])) for r in self._rows(scope, generation, sql, chunk))
        unknown: list[str] = []
        erased = self._known(scope)
        for execution_id in ids:
            if execution_id in found:
                continue
            euid = _euid_of(execution_id)
            if euid is not None and (euid in erased or self._has_objects(scope, euid)):
                found[execution_id] = euid
            else:
                unknown.append(execution_id)
        if unknown:
            raise BadRequest(
                f"{len(unknown)} execution id(s) are not executions of {_show(scope)}: "
                f"{unknown[:_SHOWN]}; check the ids (SELECT execution_id FROM threads)",
                code="unknown_execution",
                details={"execution_ids": unknown[:100]},
            )
        return tuple(sorted(set(found.values())))

    def _time_range(self, scope: Scope, selector: Selector) -> tuple[str, ...]:
        assert selector.start is not None and selector.end is not None  # reason: parse_selector
        generation = self._generation(scope)
        sql = (
            "SELECT DISTINCT process_id FROM threads_v1 WHERE parent_thread_id IS NULL "
            "AND process_id IS NOT NULL AND process_id > $1 "
            "AND ((started_at >= $2 AND started_at < $3) OR (ended_at >= $2 AND ended_at < $3)) "
            f"ORDER BY process_id LIMIT {PAGE_ROWS}"
        )
        bounds = [("timestamp", rfc3339(selector.start)), ("timestamp", rfc3339(selector.end))]
        rows = self._paged(scope, generation, sql, [], extra=bounds)
        return tuple(sorted({str(r[0]) for r in rows}))

    # --- transport -----------------------------------------------------------------------------

    def _generation(self, scope: Scope) -> str:
        generation: str = self._control.snapshot(scope)["generation"]
        return generation

    def _rows(
        self, scope: Scope, generation: str, sql: str, values: Sequence[str]
    ) -> list[tuple[object, ...]]:
        table = resident_query(
            self._control,
            scope,
            sql,
            [("string", v) for v in values],
            generation=generation,
            budget=ResidentBudget(max_result_rows=PAGE_ROWS + 1),
        ).table
        columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        return [tuple(row) for row in zip(*columns, strict=True) if None not in row]

    def _paged(
        self,
        scope: Scope,
        generation: str,
        sql: str,
        values: Sequence[str],
        *,
        extra: Sequence[tuple[str, str]] = (),
    ) -> Iterator[tuple[object, ...]]:
        """Rows of ``sql`` whose first column is the page key ``$1`` (``> $1``, ordered)."""
        after = ""
        while True:
            parameters = [("string", after), *extra, *(("string", v) for v in values)]
            table = resident_query(
                self._control,
                scope,
                sql,
                parameters,
                generation=generation,
                budget=ResidentBudget(max_result_rows=PAGE_ROWS + 1),
            ).table
            columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
            rows = [tuple(row) for row in zip(*columns, strict=True) if None not in row]
            yield from rows
            if len(rows) < PAGE_ROWS:
                return
            after = str(rows[-1][0])

    def _has_objects(self, scope: Scope, euid: str) -> bool:
        prefix = f"{evidence_prefix(scope)}streams/{euid}/"
        try:
            return next(iter(self._objects.list(prefix)), None) is not None
        except ObjectStoreError as exc:
            raise DependencyUnavailable(
                f"the bucket did not answer while resolving the selector: {exc}",
                code="object_store_unavailable",
            ) from exc


def _euid_of(execution_id: str) -> str | None:
    try:
        return ThreadRef.parse_wire(execution_id).euid.hex()
    except InvalidWireId:
        return None


def _chunks(items: Iterable[str]) -> Iterator[list[str]]:
    ordered = list(items)
    for start in range(0, len(ordered), IN_CHUNK):
        yield ordered[start : start + IN_CHUNK]


def _marks(first: int, count: int) -> str:
    return ", ".join(f"${i}" for i in range(first, first + count))


def _show(scope: Scope) -> str:
    return f"{scope.tenant}/{scope.project}/{scope.environment}"
