"""A query's streamed result and its outcome.

Iterate a :class:`QueryResult` once for row dicts (JSON-able, see :mod:`.render`); DataFusion
produces them batch by batch (``execute_stream``), so rows reach the consumer before the query
ends. After the iteration, :meth:`QueryResult.outcome` is the ``QueryOutcome``. A budget that
runs out ends the iteration early (``budget_exhausted``); rows already yielded stay yielded. A
consumer that stops early (or calls :meth:`QueryResult.cancel` / :meth:`QueryResult.close`, or
leaves a ``with`` block) gets ``cancelled``, and the DataFusion stream is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any

import pyarrow as pa
from datafusion import DataFrame

from baml_studio.catalog.source import Snapshot
from baml_studio.query.config import QueryBudgets
from baml_studio.query.errors import (
    BudgetExceeded,
    InternalQueryError,
    InvalidSql,
    QueryCancelled,
    QueryError,
    engine_message,
)
from baml_studio.query.outcome import QueryOutcome
from baml_studio.query.render import batch_rows, unique_names
from baml_studio.query.values import ValueResolver


class QueryResult:
    def __init__(
        self,
        frame: DataFrame | None,
        value_columns: frozenset[str],
        snapshot: Snapshot,
        resolver: ValueResolver,
        budgets: QueryBudgets,
        error: QueryError | None = None,
        *,
        more: Iterator[DataFrame] | None = None,
        row_limit: int | None = None,
    ) -> None:
        """``more`` yields the frames of later chunks of a chunked scan (planned lazily, after
        the rows of the earlier ones have streamed); ``row_limit`` is the query's own LIMIT
        across all chunks."""
        self._frame = frame
        self._more = more
        self._row_limit = row_limit
        self._snapshot = snapshot
        self._resolver = resolver
        self._budgets = budgets
        self.schema: pa.Schema = frame.schema() if frame is not None else pa.schema([])
        self.columns: list[str] = unique_names(self.schema)
        self.value_columns = value_columns & set(self.schema.names)
        """Output columns that hold rendered values (emitted as JSON values, not text)."""
        self._rows = 0
        self._iterator: Generator[dict[str, Any], None, None] | None = None
        self._cancel = threading.Event()
        self._outcome: QueryOutcome | None = None
        if error is not None:
            self._finish(error)

    @staticmethod
    def failed(snapshot: Snapshot, resolver: ValueResolver, error: QueryError) -> QueryResult:
        """A result with no rows that ended with ``error`` before streaming."""
        return QueryResult(None, frozenset(), snapshot, resolver, QueryBudgets(), error)

    @property
    def rows_streamed(self) -> int:
        return self._rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._iterator is not None:
            raise RuntimeError("a QueryResult can be iterated only once")
        self._iterator = self._stream()
        return self._iterator

    def __enter__(self) -> QueryResult:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop streaming at the next row (safe from another thread); the outcome becomes
        ``cancelled``."""
        self._cancel.set()

    def close(self) -> None:
        """Stop the query now if it is still streaming (the outcome becomes ``cancelled``)."""
        if self._outcome is None and self._iterator is not None:
            self._iterator.close()  # drops the DataFusion stream inside the generator
            self._release()

    def stop(self, error: QueryError) -> None:
        """End the stream now with ``error`` (a limit the caller enforces, such as result bytes);
        rows already yielded stay yielded."""
        if self._outcome is None:
            if self._iterator is not None:
                self._iterator.close()
            if self._outcome is None:
                self._finish(error)

    def query_outcome(self) -> QueryOutcome:
        """The typed outcome (``cancelled`` if the rows were not read to the end)."""
        self.close()
        if self._outcome is None:
            stopped = QueryCancelled(
                f"the consumer stopped reading after {self._rows} rows",
                "read the result to its end to get a complete outcome",
            )
            return QueryOutcome.stopped(
                self._snapshot, self._rows, self._resolver.evaluations, stopped
            )
        return self._outcome

    def outcome(self) -> dict[str, object]:
        """The camelCase ``QueryOutcome`` object (openapi.yaml)."""
        return self.query_outcome().to_json()

    def _stream(self) -> Generator[dict[str, Any], None, None]:
        if self._outcome is not None or self._frame is None:
            return
        try:
            yield from self._rows_of(self._frame)
            while self._more is not None and not self._limit_reached():
                frame = next(self._more, None)
                if frame is None:
                    break
                yield from self._rows_of(frame)
        except QueryError as exc:
            self._finish(exc)
        except Exception as exc:  # DataFusion surfaces execution errors as bare Exception
            self._finish(self._execution_error(exc))
        else:
            self._finish(None)

    def _limit_reached(self) -> bool:
        return self._row_limit is not None and self._rows >= self._row_limit

    def _rows_of(self, frame: DataFrame) -> Iterator[dict[str, Any]]:
        limit = self._budgets.max_result_rows
        for batch in frame.execute_stream():
            if self._limit_reached():
                return
            self._resolver.check_deadline()
            table = batch.to_pyarrow()
            for row in batch_rows(table, self.columns, self.value_columns, self._resolver):
                if self._cancel.is_set():
                    raise QueryCancelled("the query was cancelled", None)
                if self._limit_reached():
                    return
                if self._rows >= limit:
                    raise BudgetExceeded(
                        f"the result has more than {limit} rows",
                        "add a LIMIT or narrow the WHERE clause, or raise "
                        f"{self._budgets.rows_setting}",
                    )
                self._rows += 1
                yield row

    def _execution_error(self, exc: Exception) -> QueryError:
        if self._resolver.exhausted is not None:
            return self._resolver.exhausted
        if type(exc) not in (Exception, ValueError):  # DataFusion raises only these two
            return InternalQueryError(f"{type(exc).__name__}: {exc}", "report this bug")
        first = engine_message(exc)
        if "Resources exhausted" in first:
            return BudgetExceeded(first, "narrow the query, for example by execution_id")
        if "PyErr" in first:
            return InternalQueryError(f"a value function failed: {first}", "report this bug")
        return InvalidSql(first, "check the query's expressions against the data types")

    def _finish(self, error: QueryError | None) -> None:
        evaluations = self._resolver.evaluations
        if error is None:
            self._outcome = QueryOutcome.finished(self._snapshot, self._rows, evaluations)
        else:
            self._outcome = QueryOutcome.stopped(self._snapshot, self._rows, evaluations, error)
        self._release()

    def _release(self) -> None:
        """Drop the DataFusion frames once no row will be read any more. They hold the
        session, whose UDFs hold Python callables that reach the resolver and this result: a
        cycle through Rust that Python's collector cannot see, so without this a finished
        query's resolver (and its cache of decoded values) lived as long as the process."""
        self._frame = None
        more, self._more = self._more, None
        close = getattr(more, "close", None)
        if close is not None:
            close()
