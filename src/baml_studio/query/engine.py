"""The query engine: SQL text in, streamed rows and one typed outcome out.

``execute`` admits the statement (:mod:`.gatekeeper`), rewrites value expressions
(:mod:`.rewrite`), folds only the relations and executions the query can see
(:mod:`.pushdown`), plans it in a fresh DataFusion session (:mod:`.session`) and returns a
:class:`~baml_studio.query.result.QueryResult` that streams rows batch by batch. Errors never
raise out of ``execute``: they end the result with a failed outcome, so a stream always ends
with exactly one ``queryOutcome``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from datafusion import DataFrame

from baml_studio.catalog.schema import CALL_PATH_STATS, CALLS, ERRORS, HEALTH, THREADS
from baml_studio.catalog.source import CatalogSource, Snapshot
from baml_studio.format.errors import BamlStudioError
from baml_studio.query.chunking import chunkable, chunks
from baml_studio.query.config import QueryBudgets
from baml_studio.query.errors import (
    DependencyUnavailable,
    InternalQueryError,
    InvalidSql,
    QueryError,
    engine_message,
)
from baml_studio.query.fastpath import root_thread_columns
from baml_studio.query.gatekeeper import Statement, admit
from baml_studio.query.names import relations, suggest
from baml_studio.query.pushdown import Restriction, needed_relations
from baml_studio.query.result import QueryResult
from baml_studio.query.rewrite import rewrite
from baml_studio.query.schema_doc import schema_document
from baml_studio.query.session import build_session, sql
from baml_studio.query.udfs import build_udfs
from baml_studio.query.values import DecodedValues, ValueResolver
from baml_studio.query.views import with_view_order

_T = TypeVar("_T")
PER_EXECUTION = frozenset(r.name for r in (THREADS, CALL_PATH_STATS, CALLS, ERRORS, HEALTH))
UNKNOWN_SNAPSHOT = Snapshot(catalog_version="v1", generation="", projected_through=0)
_NO_FIELD = re.compile(r"No field named ([\w.\"]+)")
_VALID_FIELDS = re.compile(r"Valid fields are (.*?)\.?$")


@dataclass(frozen=True, slots=True)
class _Planned:
    frame: DataFrame
    value_columns: frozenset[str]
    more: Iterator[DataFrame] | None = None
    """Frames of the later chunks of a chunked scan, planned on demand."""
    limit: int | None = None


class QueryEngine:
    def __init__(
        self,
        source: CatalogSource,
        budgets: QueryBudgets | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        decoded: DecodedValues | None = None,
    ) -> None:
        """``decoded``: a cache of decoded values shared with other queries (the
        coordinator's); without it each query decodes what it reads."""
        self._source = source
        self._budgets = budgets or QueryBudgets()
        self._clock = clock
        self._decoded = decoded

    def execute(self, sql_text: str, *, internal: bool = False) -> QueryResult:
        """Plan ``sql_text`` and return its (lazily streamed) result; never raises QueryError."""
        deadline = self._clock() + self._budgets.max_wall_s
        resolver = ValueResolver(self._source, self._budgets, deadline, self._clock, self._decoded)
        snapshot = UNKNOWN_SNAPSHOT
        try:
            snapshot = self._snapshot()
            planned = self._plan(sql_text, internal, resolver, explain_only=False)
            resolver.check_deadline()
        except QueryError as exc:
            return QueryResult.failed(snapshot, resolver, exc)
        except Exception as exc:  # a bug: still end the stream with one typed outcome
            error = InternalQueryError(f"{type(exc).__name__}: {exc}", "report this bug")
            return QueryResult.failed(snapshot, resolver, error)
        return QueryResult(
            planned.frame,
            planned.value_columns,
            snapshot,
            resolver,
            self._budgets,
            more=planned.more,
            row_limit=planned.limit,
        )

    def explain(self, sql_text: str, *, internal: bool = False) -> str:
        """The logical and physical plans of a query (no data is folded or read).

        Raises :class:`~baml_studio.query.errors.QueryError` for SQL it would not run."""
        statement = admit(sql_text, internal=internal)
        if statement.kind not in ("query", "explain"):
            raise InvalidSql(
                f"only queries have a plan; got {statement.text!r}", "pass a SELECT query"
            )
        deadline = self._clock() + self._budgets.max_wall_s
        resolver = ValueResolver(self._source, self._budgets, deadline, self._clock, self._decoded)
        text = statement.text if statement.kind == "explain" else f"EXPLAIN {statement.text}"
        planned = self._plan(text, internal, resolver, explain_only=True)
        try:
            table = pa.Table.from_batches(planned.frame.collect())
        except Exception as exc:  # DataFusion raises bare Exception subclasses
            raise InternalQueryError(f"EXPLAIN failed: {engine_message(exc)}") from exc
        lines: list[str] = []
        for row in table.to_pylist():
            lines.append(f"{row['plan_type']}:")
            lines.extend("  " + line for line in str(row["plan"]).rstrip().splitlines())
        return "\n".join(lines)

    def check(self, sql_text: str, *, internal: bool = False) -> None:
        """Raise :class:`~baml_studio.query.errors.QueryError` for SQL this engine would not
        run: admitted, rewritten and planned over empty tables, as :meth:`execute` plans it;
        nothing is folded or read (a background job's SQL is checked before it is queued)."""
        statement = _with_view_order(admit(sql_text, internal=internal))
        final, _, _ = _translate(statement, internal, False)
        resolver = ValueResolver(self._source, self._budgets, float("inf"), self._clock)
        ctx = build_session({}, internal=internal, functions=build_udfs(resolver))
        try:
            sql(ctx, final)
        except Exception as exc:  # DataFusion planning errors are ValueError/Exception
            raise _planning_error(exc, internal) from exc

    def schema_document(self, internal: bool = False) -> dict[str, object]:
        """The ``--schema`` JSON document (reference facts §5.8)."""
        return schema_document(self._snapshot(), internal)

    def _snapshot(self) -> Snapshot:
        try:
            return self._source.snapshot()
        except (BamlStudioError, OSError) as exc:
            raise DependencyUnavailable(
                f"the catalog source is unavailable: {exc}", "check that the store exists"
            ) from exc

    def _plan(
        self, text: str, internal: bool, resolver: ValueResolver, *, explain_only: bool
    ) -> _Planned:
        statement = _with_view_order(admit(text, internal=internal))
        final, value_columns, needs = _translate(statement, internal, explain_only)
        is_query = statement.kind == "query" and not explain_only
        scan, limit = chunkable(statement.query) if is_query else (False, None)
        if scan and len(needs) == 1 and set(needs) <= PER_EXECUTION - {THREADS.name}:
            ((name, restriction),) = needs.items()
            ids = self._source.execution_ids() if restriction is None else sorted(restriction)
            parts = chunks(ids) if ids else [[]]
        else:
            parts = []
        if len(parts) > 1 or (parts and parts[0]):
            # row-wise scan: fold and stream chunk by chunk (first rows after one chunk)
            first = self._plan_chunk(final, {name: frozenset(parts[0])}, resolver, internal)
            more = (
                self._plan_chunk(final, {name: frozenset(part)}, resolver, internal)
                for part in parts[1:]
            )
            return _Planned(first, value_columns, more, limit)
        roots_only = root_thread_columns(statement.query) if is_query else None
        return _Planned(
            self._plan_chunk(final, needs, resolver, internal, roots_only), value_columns
        )

    def _plan_chunk(
        self,
        final: str,
        needs: Mapping[str, Restriction],
        resolver: ValueResolver,
        internal: bool,
        roots_only: frozenset[str] | None = None,
    ) -> DataFrame:
        data, folded = self._fetch(needs, roots_only)
        self._count_damage(folded, resolver)
        ctx = build_session(data, internal=internal, functions=build_udfs(resolver))
        try:
            return sql(ctx, final)
        except Exception as exc:  # DataFusion planning errors are ValueError/Exception
            raise _planning_error(exc, internal) from exc

    def _fetch(
        self, needs: Mapping[str, Restriction], roots_only: frozenset[str] | None
    ) -> tuple[dict[str, pa.Table], list[Restriction]]:
        """The tables the query reads, and the restrictions of the per-execution relations
        that were folded (root rows served from the meta plane fold nothing)."""
        groups: dict[Restriction, list[str]] = {}
        data: dict[str, pa.Table] = {}
        folded: list[Restriction] = []
        shortcut = getattr(self._source, "root_threads", None)
        for name, restriction in sorted(needs.items()):
            if restriction is not None and not restriction:
                continue  # an empty intersection: the relation is empty, nothing to fold
            if name == THREADS.name and roots_only is not None and shortcut is not None:
                # index columns of root rows only: served from the meta plane, no data file
                ids = None if restriction is None else sorted(restriction)
                fetch = functools.partial(shortcut, ids, sorted(roots_only))
                data[name] = pad_table(self._serve(fetch, [name]), THREADS.schema())
                continue
            groups.setdefault(restriction, []).append(name)
        for restriction, names in groups.items():
            ids = None if restriction is None else sorted(restriction)
            served = self._serve(
                functools.partial(self._source.tables, names, execution_ids=ids), names
            )
            data.update({name: served[name] for name in names if name in served})
            folded += [restriction for name in names if name in served and name in PER_EXECUTION]
        return data, folded

    def _serve(self, fetch: Callable[[], _T], names: list[str]) -> _T:
        try:
            return fetch()
        except QueryError:
            raise  # a budget or a cancellation from the source: the query's own outcome
        except (BamlStudioError, OSError) as exc:
            raise DependencyUnavailable(
                f"the catalog source could not serve {names}: {exc}",
                "check the store, then retry",
            ) from exc

    def _count_damage(self, folded: list[Restriction], resolver: ValueResolver) -> None:
        """Executions the answer folded whose evidence is not whole (a missing or corrupt data
        segment, no RootEnded) count as unavailable evidence, so the outcome says
        ``incomplete`` instead of hiding the damage."""
        damage = getattr(self._source, "damage", None)
        if damage is None or not folded:
            return
        ids: set[str] = set()
        for restriction in folded:
            if restriction is None:
                ids = set(self._source.execution_ids())
                break
            ids |= restriction
        found = self._serve(functools.partial(damage, sorted(ids)), ["health"])
        for reason in found.values():
            resolver.evaluations.count_unavailable(reason)


def pad_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` widened to ``schema``: columns the query does not read are filled with NULL,
    or with a zero value where the column is not nullable; present columns are cast."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table[field.name].cast(field.type))
        elif field.nullable:
            columns.append(pa.nulls(table.num_rows, field.type))
        else:
            columns.append(pa.array([_zero(field.type)] * table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _zero(type_: pa.DataType) -> object:
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return ""
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return b""
    if pa.types.is_boolean(type_):
        return False
    if pa.types.is_list(type_):
        return []
    return 0


def _with_view_order(statement: Statement) -> Statement:
    """A plain scan of a view keeps the view's order (before chunking or rewriting see it)."""
    ordered = with_view_order(statement.query)
    if ordered is None:
        return statement
    return dataclasses.replace(statement, query=ordered, query_text=ordered.sql(dialect="postgres"))


def _translate(
    statement: Statement, internal: bool, explain_only: bool
) -> tuple[str, frozenset[str], dict[str, Restriction]]:
    """The SQL DataFusion runs, its value columns and the data it needs."""
    if statement.query is None:
        return statement.text, frozenset(), {}
    query = statement.query
    rewritten = rewrite(query, internal=internal)
    query_sql = rewritten.sql if rewritten.sql is not None else statement.query_text
    reads = statement.kind == "query" or statement.analyze
    needs = needed_relations(query, internal) if reads and not explain_only else {}
    if statement.kind == "explain":
        options = f" {statement.explain_options}" if statement.explain_options else ""
        return f"EXPLAIN{options} {query_sql}", frozenset(), needs
    return query_sql, rewritten.value_columns, needs


def _planning_error(exc: Exception, internal: bool) -> QueryError:
    message = engine_message(exc)
    missing = _NO_FIELD.search(message)
    if missing:
        name = missing.group(1).rstrip(".").strip('"').rsplit(".", 1)[-1]
        valid = _VALID_FIELDS.search(message)
        columns = (
            {f.strip().strip('"').rsplit(".", 1)[-1] for f in valid.group(1).split(",")}
            if valid
            else {c.name for r in relations(internal) for c in r.columns}
        )
        guess = suggest(name, columns - {name})
        hint = f"did you mean {guess!r}? " if guess else ""
        return InvalidSql(
            f"unknown column {name!r} ({message})",
            f"{hint}see SHOW COLUMNS FROM <table> or SELECT * FROM baml_columns",
        )
    if "coerce" in message and "Utf8" in message:
        return InvalidSql(
            message,
            "a value expression outside a comparison is text; CAST it for arithmetic, "
            "for example CAST(args['customer']['age'] AS DOUBLE)",
        )
    return InvalidSql(message, "check the query against SHOW TABLES and baml_columns")
