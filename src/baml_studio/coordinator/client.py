"""HTTP client of the coordinator's query API: ``POST /v1/query`` and the query jobs (httpx).

Every request carries ``Authorization: Bearer <user token>`` and a fresh UUIDv7
``X-Baml-Request-Id``. Errors (one tree; none of httpx's types leak out)::

    BamlStudioError
    └── CoordinatorClientError
        ├── CoordinatorError          an ErrorResponse answer: .status .code .message
        │                             .retryable .request_id .details
        ├── CoordinatorUnavailable    transport failure before an answer (connect, timeout,
        │                             TLS): transient
        └── CoordinatorProtocolError  a 2xx answer that breaks the contract (a job that is not
                                      a QueryJob object)

A query's NDJSON stream never raises once it has started: :class:`RemoteResult` yields the row
objects, then :meth:`RemoteResult.outcome` is the server's ``QueryOutcome``. When the stream
breaks its contract — it ends without an outcome line, the connection drops or times out
mid-stream, a line is not a JSON object, or lines follow the outcome — the outcome is
*synthesized* by :func:`stream_incomplete_outcome`: ``resultState: incomplete``,
``queryCompleted: false``, error code ``stream_incomplete`` (retryable). Rows already yielded
stay yielded; the caller learns that the answer may be short, exactly as for unavailable values.
No request is retried automatically: a person or agent at the CLI reruns it (a job's
``Idempotency-Key`` makes a retried :meth:`CoordinatorClient.create_job` safe).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from baml_studio.coordinator.run import QueryRequest
from baml_studio.format.errors import BamlStudioError
from baml_studio.httpclient import check_base_url, new_request_id
from baml_studio.jsontext import parse_json

STREAM_INCOMPLETE = "stream_incomplete"
UNKNOWN = "unknown"


class CoordinatorClientError(BamlStudioError):
    """Any failure of a coordinator call."""


class CoordinatorError(CoordinatorClientError):
    """The coordinator answered with an HTTP error (``ErrorResponse``; a body that is not one
    gets code ``http_<status>`` and the response's reason as message)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retryable: bool,
        request_id: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{message} ({code}, HTTP {status}, request {request_id})")
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.request_id = request_id
        self.details: dict[str, Any] = dict(details or {})


class CoordinatorUnavailable(CoordinatorClientError):
    """No answer: the coordinator could not be reached, or the exchange failed (transient)."""

    retryable = True


class CoordinatorProtocolError(CoordinatorClientError):
    """A success answer whose body is not what openapi.yaml promises."""


def stream_incomplete_outcome(
    rows: int, message: str, catalog_version: str | None = None
) -> dict[str, Any]:
    """The ``QueryOutcome`` of a stream that broke before its outcome line.

    The snapshot the server bound is unknown here: ``generation`` is ``"unknown"`` and
    ``lanceVersion`` 0; value and private-state counts are zero because none were reported.
    """
    return _synthesized("incomplete", rows, STREAM_INCOMPLETE, message, True, catalog_version)


def stopped_outcome(rows: int, catalog_version: str | None = None) -> dict[str, Any]:
    """The ``QueryOutcome`` when the caller stopped reading (the connection is closed, which
    cancels the query on the server): ``cancelled``, as for a local result."""
    message = f"the consumer stopped reading after {rows} rows"
    return _synthesized("cancelled", rows, "cancelled", message, False, catalog_version)


def _synthesized(
    state: str, rows: int, code: str, message: str, retryable: bool, catalog_version: str | None
) -> dict[str, Any]:
    return {
        "queryCompleted": False,
        "resultState": state,
        "snapshot": {
            "catalogVersion": catalog_version or UNKNOWN,
            "generation": UNKNOWN,
            "lanceVersion": 0,
        },
        "rowsStreamed": rows,
        "valueEvaluations": {"attempted": 0, "available": 0, "unavailable": 0, "byReason": {}},
        "privateState": {"indexed": 0, "pending": 0},
        "error": {"code": code, "message": message, "retryable": retryable},
    }


class RemoteResult:
    """A streamed NDJSON query result: iterate once for row dicts, then :meth:`outcome`.

    ``columns`` are the first row's keys (reading it if needed; ``[]`` when there are no
    rows). Leaving a ``with`` block or calling :meth:`close` before the end drops the
    connection; the outcome is then ``cancelled``.
    """

    def __init__(self, response: httpx.Response, catalog_version: str | None = None) -> None:
        self._response = response
        self._catalog_version = catalog_version
        self._lines = _ndjson_lines(response)
        self._rows = 0
        self._outcome: dict[str, Any] | None = None
        self._peeked: dict[str, Any] | None = None
        self._columns: list[str] | None = None
        self._iterating = False

    @property
    def rows_streamed(self) -> int:
        return self._rows

    @property
    def columns(self) -> list[str]:
        if self._columns is None:
            if self._peeked is None and not self._iterating:
                self._peeked = self._next_row()
            self._columns = list(self._peeked) if self._peeked is not None else []
        return self._columns

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._iterating:
            raise RuntimeError("a RemoteResult can be iterated only once")
        self._iterating = True
        return self._stream()

    def __enter__(self) -> RemoteResult:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the connection; if the outcome has not arrived yet it becomes ``cancelled``."""
        self.outcome()

    def outcome(self) -> dict[str, Any]:
        """The ``QueryOutcome``: the server's, or synthesized (see the module docstring).
        Asked before the rows were read to the end, it closes the stream: ``cancelled``."""
        if self._outcome is None:
            self._outcome = stopped_outcome(self._rows, self._catalog_version)
        self._response.close()
        return self._outcome

    def _stream(self) -> Generator[dict[str, Any], None, None]:
        if self._peeked is not None:
            first, self._peeked = self._peeked, None
            yield first
        while (row := self._next_row()) is not None:
            yield row

    def _next_row(self) -> dict[str, Any] | None:
        """The next row (counted), or None once the outcome is known."""
        if self._outcome is not None:
            return None
        try:
            row = self._read()
        except _StreamBroken as exc:
            self._end(stream_incomplete_outcome(self._rows, str(exc), self._catalog_version))
            return None
        except httpx.HTTPError as exc:
            message = f"the connection failed after {self._rows} rows: {type(exc).__name__}: {exc}"
            self._end(stream_incomplete_outcome(self._rows, message, self._catalog_version))
            return None
        if row is not None:
            self._rows += 1
        return row

    def _read(self) -> dict[str, Any] | None:
        """The next row, or None after taking the outcome line (the stream's last)."""
        line = next(self._lines, None)
        if line is None:
            raise _StreamBroken(f"the stream ended after {self._rows} rows without an outcome")
        number = self._rows + 1
        item = parse_json(
            line, lambda _: _StreamBroken(f"line {number} is not JSON: {line[:80]!r}")
        )
        if not isinstance(item, dict):
            raise _StreamBroken(f"line {number} is not a JSON object: {line[:80]!r}")
        outcome = item.get("queryOutcome")
        if len(item) != 1 or not isinstance(outcome, dict):
            return item
        if not isinstance(outcome.get("resultState"), str):
            raise _StreamBroken("the queryOutcome has no resultState")
        extra = sum(1 for _ in self._lines)
        if extra:
            raise _StreamBroken(f"{extra} lines followed the queryOutcome")
        self._end(outcome)
        return None

    def _end(self, outcome: dict[str, Any]) -> None:
        self._outcome = outcome
        self._response.close()


class _StreamBroken(Exception):
    """Internal: the NDJSON stream broke its contract (becomes ``stream_incomplete``)."""


def _ndjson_lines(response: httpx.Response) -> Iterator[bytes]:
    """Non-blank lines split on ``\\n`` only (httpx's ``iter_lines`` also splits on U+2028,
    which JSON strings may hold unescaped)."""
    pending: list[bytes] = []
    for chunk in response.iter_bytes():
        pieces = chunk.split(b"\n")
        pending.append(pieces[0])
        if len(pieces) == 1:
            continue
        lines = [b"".join(pending), *pieces[1:-1]]
        pending = [pieces[-1]]
        yield from (line for line in lines if line.strip())
    tail = b"".join(pending)
    if tail.strip():
        yield tail


class CoordinatorClient:
    """Sync client of the coordinator at ``base_url`` (``https://host[:port]``) for one user
    token.

    ``client`` is a test seam and a way to share a pool; a client made here is closed by
    :meth:`close`. ``timeout_s`` bounds connecting and each read; a query's read timeout is
    stretched to its wall budget plus ``timeout_s``, since the server may plan that long before
    the first row.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        check_base_url(base_url, "coordinator", "http(s)://host[:port]")
        if not token:
            raise ValueError("the user token is empty")
        self._base = base_url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        self._owns_client = client is None
        self._http = client if client is not None else httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def query(self, request: QueryRequest) -> RemoteResult:
        """``POST /v1/query``: raises before the stream starts, never after it."""
        if request.mode != "interactive":
            raise ValueError("POST /v1/query runs interactive queries; use create_job")
        read = request.budget.max_wall_ms / 1000 + self.timeout_s
        timeout = httpx.Timeout(self.timeout_s, read=read)
        response = self._send("POST", "/v1/query", json_body=request.to_json(), timeout=timeout)
        return RemoteResult(response, request.catalog_version)

    def create_job(
        self, request: QueryRequest, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/query-jobs`` (the request runs as ``background``); the ``QueryJob``.

        Without ``idempotency_key`` a fresh one is made, so only this call is deduplicated."""
        body = dataclasses.replace(request, mode="background").to_json()
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return _job(self._call("POST", "/v1/query-jobs", json_body=body, headers=headers))

    def get_job(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/query-jobs/{job_id}``: state, progress, ``rows_so_far``, snapshot."""
        return _job(self._call("GET", _job_path(job_id)))

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        """``DELETE /v1/query-jobs/{job_id}``; idempotent, a final job comes back unchanged."""
        return _job(self._call("DELETE", _job_path(job_id)))

    def job_result(self, job_id: str) -> RemoteResult:
        """``GET /v1/query-jobs/{job_id}/result``, following a 303 to the stored object (httpx
        drops ``Authorization`` when the redirect leaves the coordinator's origin). A job that
        has not succeeded raises :class:`CoordinatorError` 409."""
        response = self._send("GET", _job_path(job_id) + "/result", follow_redirects=True)
        return RemoteResult(response)

    def _call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        response = self._send(method, path, json_body=json_body, headers=headers)
        try:
            response.read()
        except httpx.HTTPError as exc:
            raise CoordinatorUnavailable(
                f"{method} {path}: reading the answer failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            response.close()
        return response

    def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        follow_redirects: bool = False,
    ) -> httpx.Response:
        """The streaming response of a 2xx answer, else the typed error."""
        request_id = new_request_id()
        sent = {"Authorization": f"Bearer {self._token}", "X-Baml-Request-Id": request_id}
        sent.update(headers or {})
        try:
            request = self._http.build_request(
                method,
                self._base + path,
                json=json_body,
                headers=sent,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
            response = self._http.send(request, stream=True, follow_redirects=follow_redirects)
        except httpx.HTTPError as exc:
            raise CoordinatorUnavailable(
                f"{method} {self._base}{path}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.is_success:
            return response
        try:
            response.read()
        except httpx.HTTPError:
            pass  # the status alone still makes a typed error
        finally:
            response.close()
        raise _error(response, request_id)


def _job_path(job_id: str) -> str:
    if not job_id:
        raise ValueError("the job id is empty")
    return "/v1/query-jobs/" + quote(job_id, safe="")


def answer_object(
    response: httpx.Response, what: str, schema: str, fits: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The JSON object of a success answer about ``what`` (``job``), or
    :class:`CoordinatorProtocolError` when it is not JSON or not ``schema`` (``a QueryJob``):
    an object that ``fits``."""
    body = parse_json(
        response.content,
        lambda reason: CoordinatorProtocolError(f"the {what} answer is not JSON: {reason}"),
    )
    if not isinstance(body, dict) or not fits(body):
        raise CoordinatorProtocolError(f"the {what} answer is not {schema}: {body!r:.200}")
    return body


def _job(response: httpx.Response) -> dict[str, Any]:
    return answer_object(
        response,
        "job",
        "a QueryJob",
        lambda body: isinstance(body.get("job_id"), str) and isinstance(body.get("state"), str),
    )


def _error(response: httpx.Response, request_id: str) -> CoordinatorError:
    status = response.status_code
    transient = status in (429, 503)
    try:
        body = parse_json(response.content, ValueError)
    except (ValueError, httpx.ResponseNotRead):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if (
        isinstance(error, dict)
        and isinstance(error.get("code"), str)
        and isinstance(error.get("message"), str)
    ):
        retryable = error.get("retryable")
        echoed = error.get("request_id")
        details = error.get("details")
        return CoordinatorError(
            status,
            error["code"],
            error["message"],
            retryable if isinstance(retryable, bool) else transient,
            echoed if isinstance(echoed, str) and echoed else request_id,
            details if isinstance(details, dict) else None,
        )
    reason = response.reason_phrase or "error"
    return CoordinatorError(status, f"http_{status}", reason, transient, request_id)
