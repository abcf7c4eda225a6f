"""Opening ClickHouse clients, the one-chDB-path guard, and the error translation.

Every ``clickhouse_connect`` (and raw ``chdb``) failure crosses into our types here:
:func:`translate` maps a ClickHouse error code to :class:`BudgetExceeded`, :class:`QueryRejected`
or :class:`FactStoreUnavailable`. A client that saw an error is closed and never used again
(chDB can prepend a failed query's partial output to the next result on the same connection).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from baml_studio.apierrors import ApiError
from baml_studio.control.facts.config import FactStoreConfig
from baml_studio.control.facts.errors import (
    BudgetExceeded,
    ChdbPathInUse,
    FactStoreUnavailable,
    QueryRejected,
)

BUDGET_CODES: dict[int, str] = {
    158: "max_rows_to_read",
    159: "max_execution_time",
    160: "max_execution_time",
    241: "max_memory_usage",
    307: "max_bytes_to_read",
    396: "max_result_rows",
}
"""Limit errors, with the setting that usually raised them (the message may name it)."""

REJECTED_CODES: dict[int, str] = {
    6: "CANNOT_PARSE_TEXT",
    16: "NO_SUCH_COLUMN_IN_TABLE",
    36: "BAD_ARGUMENTS",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    42: "NUMBER_OF_ARGUMENTS_DOESNT_MATCH",
    43: "ILLEGAL_TYPE_OF_ARGUMENT",
    44: "ILLEGAL_COLUMN",
    46: "UNKNOWN_FUNCTION",
    47: "UNKNOWN_IDENTIFIER",
    50: "UNKNOWN_TYPE",
    53: "TYPE_MISMATCH",
    60: "UNKNOWN_TABLE",
    62: "SYNTAX_ERROR",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    81: "UNKNOWN_DATABASE",
    115: "UNKNOWN_SETTING",
    117: "INCORRECT_DATA",
    131: "TOO_LARGE_STRING_SIZE",
    153: "ILLEGAL_DIVISION",
    164: "READONLY",
    167: "TOO_DEEP_AST",
    168: "TOO_BIG_AST",
    179: "MULTIPLE_EXPRESSIONS_FOR_ALIAS",
    184: "ILLEGAL_AGGREGATION",
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    215: "NOT_AN_AGGREGATE",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    352: "AMBIGUOUS_COLUMN_NAME",
    376: "CANNOT_PARSE_UUID",
    386: "NO_COMMON_TYPE",
    395: "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO",
    407: "DECIMAL_OVERFLOW",
    440: "INVALID_LIMIT_EXPRESSION",
    675: "CANNOT_PARSE_IPV4",
    676: "CANNOT_PARSE_IPV6",
}
"""Errors of the SQL itself or of the values it computes (a division by zero, a text that does
not parse as the type it is cast to, a LIMIT past UInt64): the same query fails the same way, so
they are not transient."""

_CODE = re.compile(r"\bCode:\s*(\d+)")
_NAME = re.compile(r"\(([A-Z][A-Z0-9_]+)\)")
_CONTROLLED_BY = re.compile(r"controlled by '(\w+)' setting")
_RESULT_BYTES = re.compile(r"Limit for result exceeded, max bytes")

_chdb_lock = threading.Lock()
_chdb_path: str | None = None
"""The chDB path this process opened; chDB cannot open another for the life of the process."""


def translate(exc: BaseException, doing: str) -> ApiError:
    """Our error for a ClickHouse failure while ``doing`` (e.g. ``"query"``)."""
    if isinstance(exc, ApiError):
        return exc
    text = str(exc)
    code = getattr(exc, "code", None)
    if not isinstance(code, int):
        match = _CODE.search(text)
        code = int(match.group(1)) if match else None
    name_match = _NAME.findall(text)
    name = name_match[-1] if name_match else None
    summary = _first_line(text)
    if code == 241 and "(total)" in text:
        return FactStoreUnavailable(
            f"ClickHouse is short of memory during {doing}: {summary}",
            details={"clickhouse_code": code},
        )
    if code in BUDGET_CODES or "Limit for" in text:
        limit = _limit_name(text, code, name)
        return BudgetExceeded(
            f"{doing} exceeded its {limit} budget: {summary}. Narrow the query (time window, "
            "filters, LIMIT) or raise the budget",
            details={"limit": limit, "clickhouse_code": code},
        )
    if code in REJECTED_CODES:
        return QueryRejected(
            f"ClickHouse rejected the {doing}: {summary}",
            details={"clickhouse_code": code, "clickhouse_error": name or REJECTED_CODES[code]},
        )
    return FactStoreUnavailable(
        f"fact store failed during {doing}: {summary}",
        details={"clickhouse_code": code} if code is not None else None,
    )


def _limit_name(text: str, code: int | None, name: str | None) -> str:
    controlled = _CONTROLLED_BY.search(text)
    if controlled:
        return controlled.group(1)
    if code == 396 and _RESULT_BYTES.search(text):
        return "max_result_bytes"
    if code in BUDGET_CODES:
        return BUDGET_CODES[code]
    return name or (f"code_{code}" if code is not None else "unknown")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no message"
    return line[:500]


def chdb_location(dsn: str) -> str:
    """The engine path a ``chdb://`` DSN opens, spelled as chDB compares it."""
    parsed = urlparse(dsn)
    location = parsed.netloc.rpartition("@")[2] if parsed.netloc else parsed.path
    if location in ("", "memory", ":memory:"):
        return ":memory:"
    return os.path.realpath(location)


class Connector:
    """Opens clients for one DSN. The first ``chdb://`` DSN opened fixes the process's path."""

    def __init__(self, config: FactStoreConfig) -> None:
        self._config = config
        self._location = chdb_location(config.dsn) if config.embedded else None

    def open(self) -> Client:
        """A new client; :class:`ChdbPathInUse` or :class:`FactStoreUnavailable` on failure."""
        if self._location is None:
            return self._open_server()
        global _chdb_path
        with _chdb_lock:
            if _chdb_path is not None and _chdb_path != self._location:
                raise ChdbPathInUse(
                    f"this process already opened chDB at {_chdb_path!r} and cannot open "
                    f"{self._location!r}: chDB allows one path per process for its life. Use "
                    "the same path (isolate by database name) or run another process",
                    details={"opened": _chdb_path, "requested": self._location},
                )
            if _chdb_path is None:  # the first open starts the engine: hold the lock
                client = self._open_chdb()
                _chdb_path = self._location
                return client
        return self._open_chdb()

    def _open_chdb(self) -> Client:
        try:
            return clickhouse_connect.get_client(dsn=self._config.dsn)
        except (ClickHouseError, RuntimeError, OSError) as exc:
            if "already initialized" in str(exc):
                raise ChdbPathInUse(
                    f"chDB in this process is already open at another path than "
                    f"{self._location!r}: {_first_line(str(exc))}",
                    details={"opened": None, "requested": self._location},
                ) from exc
            raise translate(exc, "connect") from exc

    def _open_server(self) -> Client:
        try:
            return clickhouse_connect.get_client(
                dsn=self._config.dsn,
                connect_timeout=self._config.connect_timeout_s,
                send_receive_timeout=self._config.send_receive_timeout_s,
                autogenerate_session_id=False,
            )
        except (ClickHouseError, OSError) as exc:
            host = urlparse(self._config.dsn).netloc.rpartition("@")[2]
            raise FactStoreUnavailable(
                f"cannot connect to ClickHouse at {host}: {_first_line(str(exc))}"
            ) from exc


class ClientPool:
    """Reusable clients (the store keeps one pool for its own statements and another for
    caller queries). A client is returned to the pool only after a call that did not raise;
    otherwise it is closed."""

    def __init__(self, connector: Connector, max_idle: int = 8) -> None:
        self._connector = connector
        self._max_idle = max_idle
        self._idle: list[Client] = []
        self._lock = threading.Lock()

    @contextmanager
    def client(self) -> Iterator[Client]:
        with self._lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = self._connector.open()
        try:
            yield client
        except BaseException:
            close_quietly(client)
            raise
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(client)
                return
        close_quietly(client)

    @property
    def idle(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for client in idle:
            close_quietly(client)


def close_quietly(client: Client) -> None:
    # closing a broken connection has nothing left to report
    with contextlib.suppress(ClickHouseError, RuntimeError, OSError):
        client.close()
