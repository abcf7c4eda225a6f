"""One coordinator query from classification to its last NDJSON line (:class:`Run`).

Classes (system-contract "Query classes"): ``public`` queries read only public columns and run
whole in the control plane (one resident subquery, no Lance read). Their rows are cast to the
schema the local engine would give the same SQL (planned by DataFusion over empty tables), so a
column has one type whichever side ran it. A public query the resident compiler refuses (a
function it does not allow) falls back to the engine path. ``private`` (every per-execution
relation restricted by ``execution_id``) and ``mixed`` queries run in the engine over a
:class:`~.source.CoordinatorSource`; their candidate rows are first counted by a resident
``count(*)`` with the same pruning predicates, and an interactive query over more than
``max_interactive_candidates`` ends with ``query_too_costly`` (remedy: a background job).

``privateState``: a row with an ``execution_id`` column is ``pending`` when that execution's
private rows are not in the bound Lance version; a row without one (an aggregate, say) is
``pending`` when any candidate the query read was. Public-only rows need no private part and
count as ``indexed``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from sqlglot import exp

from baml_studio.apierrors import ApiError, BadRequest
from baml_studio.catalog.source import CatalogSource
from baml_studio.coordinator.errors import QueryTooCostly
from baml_studio.coordinator.run import (
    Mode,
    Phase,
    QueryRequest,
    RequestBudget,
    outcome_line,
    row_line,
)
from baml_studio.coordinator.shape import QueryShape, query_shape
from baml_studio.coordinator.snapshot import BoundSnapshot
from baml_studio.coordinator.source import ID_CHUNK, CoordinatorSource, SourceStats
from baml_studio.projector.errors import ControlPlaneRefused, ControlPlaneUnavailable
from baml_studio.projector.lance_store import sql_literal
from baml_studio.query.config import QueryBudgets
from baml_studio.query.engine import QueryEngine
from baml_studio.query.errors import (
    BudgetExceeded,
    DependencyUnavailable,
    InternalQueryError,
    InvalidSql,
    QueryCancelled,
    QueryError,
)
from baml_studio.query.gatekeeper import Statement, admit
from baml_studio.query.outcome import ValueEvaluations
from baml_studio.query.render import batch_rows, unique_names
from baml_studio.query.session import build_session, sql
from baml_studio.query.values import ValueResolver

if TYPE_CHECKING:
    from datafusion import SessionContext

    from baml_studio.coordinator.service import Coordinator

log = logging.getLogger(__name__)
RESIDENT_DIALECT = "postgres"


class Run:
    """A started query (the :class:`~.run.QueryRun` protocol)."""

    def __init__(
        self,
        coordinator: Coordinator,
        snapshot: BoundSnapshot,
        sql_text: str,
        request: QueryRequest,
        mode: Mode,
    ) -> None:
        self._c = coordinator
        self._snapshot = snapshot
        self._sql = sql_text
        self._request = request
        self._mode = mode
        self._phase: Phase = "planning"
        self._fraction = 0.0
        self._rows = 0
        self._bytes = 0
        self._cancel = threading.Event()
        self._outcome: dict[str, Any] | None = None
        self._engine_result: Any = None
        self._started = time.monotonic()
        self.stats = SourceStats()
        """What this query read (resident subqueries, Lance scans, bytes)."""
        self.query_class: str | None = None
        self.resident_sql: list[str] = []

    # --- QueryRun ------------------------------------------------------------------------

    @property
    def snapshot(self) -> dict[str, Any]:
        return self._snapshot.to_json()

    @property
    def bound(self) -> BoundSnapshot:
        """The snapshot this run reads (its leased Lance versions included)."""
        return self._snapshot

    @property
    def budget(self) -> RequestBudget:
        """The request's budget as the run applies it (the wall budget capped)."""
        return self._request.budget

    @property
    def rows_so_far(self) -> int:
        return self._rows

    @property
    def progress(self) -> tuple[Phase, float]:
        return self._phase, self._fraction

    def cancel(self) -> None:
        self._cancel.set()
        result = self._engine_result
        if result is not None:
            result.cancel()

    def outcome(self) -> dict[str, Any] | None:
        return self._outcome

    def keep(self) -> None:
        """Lease the bound versions for the whole wall budget from now (raises 503)."""
        self._c.renew(self._snapshot, self._request.budget.max_wall_ms / 1000)

    def lines(self) -> Iterator[str]:
        try:
            if self._mode == "background":
                # a job may wait in the queue: its wall budget runs from its first line,
                # and its versions are leased for that budget again before it reads
                self._started = time.monotonic()
                try:
                    self.keep()
                except ApiError as exc:
                    yield self._end(DependencyUnavailable(str(exc), "retry"))
                    return
            yield from self._lines()
        except Exception as exc:  # a bug: the stream still ends with its one typed outcome
            log.exception("query failed inside the coordinator")
            if self._outcome is None:
                failed = InternalQueryError(f"the coordinator failed ({type(exc).__name__})")
                yield self._end(failed)
        finally:
            if self._outcome is None:  # the consumer went away (a closed connection)
                self._set_outcome(
                    _failed_state(QueryCancelled("the client stopped reading", None)),
                    ValueEvaluations().to_json(),
                    QueryCancelled("the client stopped reading the stream", None),
                    (self._rows, 0),
                )
                log.info("query cancelled by the client rows=%d", self._rows)

    # --- classes -------------------------------------------------------------------------

    def _lines(self) -> Iterator[str]:
        try:
            statement = admit(self._sql, internal=False)
            shape = query_shape(statement.query) if statement.query is not None else None
        except QueryError as exc:
            yield self._end(exc)
            return
        self.query_class = shape.query_class if shape is not None else "meta"
        log.info("query classified class=%s", self.query_class)
        whole = shape is not None and not shape.views and statement.kind == "query"
        if whole and self.query_class == "public":
            try:
                yield from self._public(statement)
                return
            except _Fallback as exc:
                log.info("the whole query cannot run resident (%s); engine path", exc)
        yield from self._engine(shape, reads=statement.kind == "query" or statement.analyze)

    def _public(self, statement: Statement) -> Iterator[str]:
        assert statement.query is not None  # reason: kind "query" always has one
        self._phase, self._fraction = "resident", 0.1
        try:
            schema = _engine_schema(statement.query_text)
        except Exception as exc:  # DataFusion plan errors: the engine path words them
            raise _Fallback("the plan failed") from exc
        budget = self._request.budget
        # one row more than the budget shows that it ran out (the control plane refuses a
        # result larger than its max_result_rows instead of truncating it)
        text = _capped(statement.query, budget.max_result_rows + 1).sql(dialect=RESIDENT_DIALECT)
        try:
            self.stats.add(resident_queries=1)
            table = self._resident(text, budget.max_result_rows + 1)
        except ControlPlaneRefused as exc:
            if exc.status == 400:
                raise _Fallback(exc.code or str(exc)) from exc
            yield self._end(_refusal(exc))
            return
        except ControlPlaneUnavailable as exc:
            yield self._end(DependencyUnavailable(f"the control plane failed: {exc}", "retry"))
            return
        except QueryError as exc:
            yield self._end(exc)
            return
        self._phase, self._fraction = "merging", 0.8
        conformed = _conform(table, schema)
        names = unique_names(conformed.schema)
        resolver = ValueResolver(cast(CatalogSource, _NoValues()), QueryBudgets(), float("inf"))
        for batch in conformed.to_batches(max_chunksize=1024):
            for row in batch_rows(batch, names, frozenset(), resolver):
                stop = self._admit_row(row)
                if stop is not None:
                    yield self._end(stop, indexed=self._rows)
                    return
                yield row_line(row)
        yield self._end(None, indexed=self._rows)

    def _engine(self, shape: QueryShape | None, *, reads: bool) -> Iterator[str]:
        self._phase, self._fraction = "resident", 0.1
        shape = shape or QueryShape({}, {}, {}, False, False)
        try:
            if reads:
                self._estimate(shape)
        except QueryError as exc:
            yield self._end(exc)
            return
        except (ControlPlaneRefused, ControlPlaneUnavailable) as exc:
            yield self._end(_refusal(exc))
            return
        budget = self._request.budget
        source = CoordinatorSource(
            self._snapshot,
            self._source_resident,
            self._c.private_store(self._snapshot.scope),
            shape,
            objects=self._c.objects,
            cache=self._c.cache,
            max_private_bytes=budget.max_private_bytes_read,
            stats=self.stats,
            shared=self._c.shared,
        )
        # what is left of the wall budget since the snapshot was bound, or a background run
        # began (its versions leased for the budget then): the engine stops reading Lance
        # before the lease ends
        left_s = budget.max_wall_ms / 1000 - (time.monotonic() - self._started)
        budgets = QueryBudgets(
            max_wall_s=max(left_s, 0.001),
            max_result_rows=budget.max_result_rows,
            rows_setting="budget.max_result_rows",
            wall_setting="budget.max_wall_ms",
        )
        self._phase, self._fraction = "private", 0.3
        result = QueryEngine(source, budgets, decoded=self._c.shared.decoded).execute(self._sql)
        self._engine_result = result
        self._phase, self._fraction = "merging", 0.6
        pending = indexed = 0
        for row in result:
            stop = self._admit_row(row)
            if stop is not None:
                result.stop(stop)
                break
            if shape.private and _is_pending(row, source):
                pending += 1
            else:
                indexed += 1
            yield row_line(row)
        outcome = result.outcome()
        outcome["rowsStreamed"] = self._rows  # the engine also counts a row refused here
        outcome["snapshot"] = self._snapshot.to_json()
        outcome["privateState"] = {"indexed": indexed, "pending": pending}
        self._outcome = outcome
        self._phase, self._fraction = "writing", 1.0
        yield outcome_line(outcome)

    def _estimate(self, shape: QueryShape) -> None:
        """Count the candidate public rows; too many for the mode ends the query."""
        cap = (
            self._c.config.max_interactive_candidates
            if self._mode == "interactive"
            else self._c.config.max_background_candidates
        )
        total = 0
        for name, restriction in shape.relations.items():
            if restriction is not None and len(restriction) <= ID_CHUNK:
                continue  # an identity lookup: bounded by its executions
            where = shape.filters.get(name)
            ids = sorted(restriction) if restriction is not None else None
            chunks = (
                [None]
                if ids is None
                else [ids[i : i + ID_CHUNK] for i in range(0, len(ids), ID_CHUNK)]
            )
            for chunk in chunks:
                conditions = [f"({where})"] if where else []
                if chunk is not None:
                    listed = ", ".join(sql_literal(i) for i in chunk)
                    conditions.append(f"execution_id IN ({listed})")
                text = f"SELECT count(*) AS n FROM {name}"
                if conditions:
                    text += " WHERE " + " AND ".join(conditions)
                self.stats.add(resident_queries=1)
                table = self._resident(text, 1)
                total += int(table.column(0)[0].as_py()) if table.num_rows else 0
        if total > cap:
            raise QueryTooCostly(
                f"the query needs {total} public candidate rows for its private part; the "
                f"{self._mode} limit is {cap}"
            )

    # --- helpers -------------------------------------------------------------------------

    def _resident(self, text: str, max_rows: int) -> pa.Table:
        self.resident_sql.append(text)
        wall = self._request.budget.max_wall_ms
        remaining = wall - int((time.monotonic() - self._started) * 1000)
        if remaining <= 0:
            raise BudgetExceeded(
                f"the query ran longer than its wall budget of {wall} ms",
                "narrow the query or raise budget.max_wall_ms",
            )
        return self._c.resident(self._snapshot, text, max_wall_ms=remaining, max_rows=max_rows)

    def _source_resident(self, text: str) -> pa.Table:
        try:
            cap = max(
                self._c.config.max_interactive_candidates,
                self._c.config.max_background_candidates if self._mode == "background" else 0,
            )
            return self._resident(text, cap)
        except ControlPlaneRefused as exc:
            raise _refusal(exc) from exc
        except ControlPlaneUnavailable as exc:
            raise DependencyUnavailable(f"the control plane failed: {exc}", "retry") from exc

    def _admit_row(self, row: dict[str, Any]) -> QueryError | None:
        """None if ``row`` may be streamed; else the error that ends the stream before it."""
        if self._cancel.is_set():
            return QueryCancelled("the query was cancelled", None)
        budget = self._request.budget
        if self._rows >= budget.max_result_rows:
            return BudgetExceeded(
                f"the result has more than {budget.max_result_rows} rows",
                "add a LIMIT or narrow the WHERE clause, or raise budget.max_result_rows",
            )
        size = len(row_line(row)) + 1
        if self._bytes + size > budget.max_result_bytes:
            return BudgetExceeded(
                f"the result is larger than {budget.max_result_bytes} bytes",
                "select fewer columns or rows, or raise budget.max_result_bytes",
            )
        if (time.monotonic() - self._started) * 1000 > budget.max_wall_ms:
            return BudgetExceeded(
                f"the query ran longer than its wall budget of {budget.max_wall_ms} ms",
                "narrow the query or raise budget.max_wall_ms",
            )
        self._rows += 1
        self._bytes += size
        return None

    def _end(self, error: QueryError | None, *, indexed: int = 0) -> str:
        evaluations = ValueEvaluations().to_json()
        state = "complete" if error is None else _failed_state(error)
        self._set_outcome(state, evaluations, error, (indexed, 0))
        assert self._outcome is not None  # reason: just set
        self._phase, self._fraction = "writing", 1.0
        return outcome_line(self._outcome)

    def _set_outcome(
        self,
        state: str,
        evaluations: dict[str, object],
        error: QueryError | None,
        private: tuple[int, int],
    ) -> None:
        outcome: dict[str, Any] = {
            "queryCompleted": state in ("complete", "incomplete"),
            "resultState": state,
            "snapshot": self._snapshot.to_json(),
            "rowsStreamed": self._rows,
            "valueEvaluations": evaluations,
            "privateState": {"indexed": private[0], "pending": private[1]},
        }
        if error is not None:
            outcome["error"] = error.to_json()
        self._outcome = outcome


class _Fallback(Exception):
    """The resident compiler refused a public query: run it in the engine instead."""


class _NoValues:
    """A value source for public rows (which hold no value handles)."""

    def read_value(self, codec: int, cid: bytes, max_bytes: int) -> bytes:
        raise InternalQueryError("a public-only result asked for a value body")


def _failed_state(error: QueryError) -> str:
    if isinstance(error, BudgetExceeded):
        return "budget_exhausted"
    if isinstance(error, QueryCancelled):
        return "cancelled"
    return "failed"


def _refusal(exc: ControlPlaneRefused | ControlPlaneUnavailable) -> QueryError:
    if isinstance(exc, ControlPlaneUnavailable):
        return DependencyUnavailable(f"the control plane failed: {exc}", "retry the query")
    if exc.code == "budget_exceeded" or exc.status == 413:
        return BudgetExceeded(
            f"the public part exceeded its budget in the control plane: {exc}",
            "narrow the query, or run it as a background job (POST /v1/query-jobs)",
        )
    if exc.status == 400:
        return InvalidSql(f"the control plane refused the public part: {exc}", None)
    return DependencyUnavailable(f"the control plane refused the query: {exc}", None)


def _is_pending(row: dict[str, Any], source: CoordinatorSource) -> bool:
    execution = row.get("execution_id")
    if isinstance(execution, str):
        return execution in source.pending
    return bool(source.pending)


def _capped(query: exp.Query, rows: int) -> exp.Query:
    """``query`` returning at most ``rows`` rows, in its own order."""
    if isinstance(query, exp.Select):
        limit = query.args.get("limit")
        value = limit.expression if isinstance(limit, exp.Limit) else None
        if isinstance(value, exp.Literal) and value.is_int and int(value.this) <= rows:
            return query
        return query.limit(rows, copy=True)
    return exp.select("*").from_(query.subquery("capped")).limit(rows)


_PLANNER: SessionContext | None = None
_PLANNER_LOCK = threading.Lock()


def warm_planner() -> None:
    """Build the process's empty planning session now rather than in the first query."""
    with _PLANNER_LOCK:
        _planner_locked()


def _planner_locked() -> SessionContext:
    global _PLANNER
    if _PLANNER is None:
        _PLANNER = build_session({}, internal=False, functions=[])
    return _PLANNER


def check_sql(text: str) -> None:
    """400 ``invalid_sql`` for SQL the engine would not run (syntax, statement kind, unknown
    relation or column, types): a background job's SQL is checked before it is queued, as
    openapi.yaml's ``createQueryJob`` says ("validates and plans the SQL")."""
    try:
        QueryEngine(cast(CatalogSource, _NoValues())).check(text)
    except InvalidSql as exc:
        remedy = f" ({exc.remedy})" if exc.remedy else ""
        raise BadRequest(f"{exc}{remedy}", code="invalid_sql") from exc
    except Exception:  # a bug of the check: the job's run words what is wrong, if anything
        log.exception("checking a background job's SQL failed; queued unchecked")


def _engine_schema(text: str) -> pa.Schema:
    """The output schema the local engine gives ``text``, planned over empty tables in one
    session shared by the process (built once: ~5 ms; planning a query in it, well under)."""
    with _PLANNER_LOCK:
        return sql(_planner_locked(), text).schema()


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The resident answer with the engine's column names and types, by position."""
    if table.num_columns != len(schema):
        raise InternalQueryError(
            f"the resident answer has {table.num_columns} columns, the plan {len(schema)}"
        )
    columns = []
    for index, f in enumerate(schema):
        column = table.column(index)
        if pa.types.is_binary(column.type) and pa.types.is_string(f.type):
            column = column.cast(pa.string())
        try:
            columns.append(column.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            columns.append(column)  # keep the resident type; rendering is by value
    return pa.Table.from_arrays(columns, names=[f.name for f in schema])


def outcome_of(line: str) -> dict[str, Any] | None:
    data = json.loads(line)
    return data.get("queryOutcome") if isinstance(data, dict) else None
