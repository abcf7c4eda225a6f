"""HTTP client of the control plane's workload API (httpx): schemas, generation, batches, erasure.

Used by the projector (and later the coordinator and the gateway). Every request carries
``Authorization: Bearer <workload token>`` and a fresh ``X-Baml-Request-Id`` (a UUIDv7, as the
spec recommends); a token given as a callable is asked again for every request, so a rotated
token is picked up, and a 401 is retried once when the callable hands out a different token.

Answers map to errors by status, never by message text:

=====================================  ==========================================================
``409 inactive_generation``            :class:`InactiveGeneration` (``active_generation`` set;
                                       the client also caches that generation for the scope)
``401 403``                            :class:`ControlPlaneAuthRefused` (a transient
                                       ``ControlPlaneRefused``: the token or the deployment's
                                       scope, not the request, is at fault)
``404 405``                            :class:`ControlPlaneNotFound` (a transient
                                       ``ControlPlaneRefused``: a route or catalog version
                                       that is not there is configuration, not evidence)
other 4xx (400 409 413)                :class:`ControlPlaneRefused` (terminal): ``status``, the
                                       ``ErrorResponse`` ``code``; its message and details in
                                       the text
``429 500 502 503 504``, transport     retried with exponential backoff and full jitter, waiting
errors, timeouts                       at least ``Retry-After`` (up to ``retry_after_max_s``);
                                       then :class:`ControlPlaneUnavailable` (transient)
a 2xx body that breaks the contract    :class:`ControlPlaneUnavailable` (not retried here)
=====================================  ==========================================================

The errors are those of :mod:`baml_studio.projector.errors`; their messages name the operation,
status, ``ErrorResponse`` code, message and details, and the request id, so a dead-lettered
message says which request failed and why.

Every operation here is safe to repeat: a batch is idempotent by (generation, batch_id, digest),
an erasure by root ids, and snapshots and schemas are reads. Logs carry request ids, operation,
relation, batch id and status; never tokens or bodies.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import httpx
import pyarrow as pa
import zstandard

from baml_studio.gateway.config import Scope
from baml_studio.httpclient import check_base_url, new_request_id
from baml_studio.jsontext import parse_json
from baml_studio.projector.errors import (
    ControlPlaneAuthRefused,
    ControlPlaneNotFound,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    InactiveGeneration,
    ProjectorError,
)
from baml_studio.publisher.client import NODELAY, retry_after_seconds

if TYPE_CHECKING:
    from baml_studio.projector.batch_sender import AsyncBatchSender

log = logging.getLogger(__name__)

ARROW_STREAM = "application/vnd.apache.arrow.stream"
ERASURE_CHUNK = 1000
"""Root ids per ``POST /projection-erasures`` (``ProjectionErasureRequest.root_ids`` maxItems)."""
MAX_IDEMPOTENCY_KEY = 256
MAX_DETAIL_CHARS = 1000
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
AUTH_STATUS = frozenset({401, 403})
"""Refusals of the token or its scope: :class:`ControlPlaneAuthRefused`."""
NOT_FOUND_STATUS = frozenset({404, 405})
"""No such route or resource: :class:`ControlPlaneNotFound`."""
ZSTD_LEVEL = 3
MAX_SENDER_THREADS = 64
"""Threads of the blocking transport's batch pool (a client given an ``httpx.Client``): past a
few dozen, Python threads mostly wait for each other."""

TokenSource = str | Callable[[], str]


class PublicBatchLike(Protocol):
    """One public batch of the projection (``project.py``'s batches fit)."""

    @property
    def relation(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def batch_id(self) -> str: ...
    @property
    def root_id(self) -> str: ...
    @property
    def table(self) -> pa.Table: ...


@dataclass(frozen=True, slots=True)
class BatchAck:
    """A ``ProjectionBatchResponse``: ``status`` 201 (written) or 200 (already visible)."""

    status: int
    batch_id: str
    root_id: str
    generation: str
    row_count: int
    content_digest: str

    @property
    def created(self) -> bool:
        return self.status == 201


@dataclass(frozen=True, slots=True)
class ErasureAck:
    generation: str
    root_ids: tuple[str, ...]
    """Root ids whose facts are gone (also those that had none)."""
    requests: int


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    body: bytes
    """The zstd frame sent."""
    digest: str
    """``sha256:<hex>`` of the uncompressed Arrow IPC stream."""
    raw_bytes: int


_COMPRESSORS = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    """This thread's compressor: one per batch cost a fresh context each time (~20 % of
    encoding a batch; a compressor must not be shared by threads at once)."""
    compressor: zstandard.ZstdCompressor | None = getattr(_COMPRESSORS, "compressor", None)
    if compressor is None:
        compressor = _COMPRESSORS.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def encode_batch(table: pa.Table) -> EncodedBatch:
    """``table`` as one Arrow IPC stream, its digest, and the stream compressed with zstd
    (the frame declares its content size)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    raw = sink.getvalue()  # hashed and compressed in place, not copied to bytes
    body = _compressor().compress(raw)
    return EncodedBatch(body, "sha256:" + hashlib.sha256(raw).hexdigest(), raw.size)


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One ``PUT /projection-batches/{batch_id}`` ready to send."""

    path: str
    headers: dict[str, str]
    body: bytes
    context: str


def batch_request(scope: Scope, generation: str, batch: PublicBatchLike) -> BatchRequest:
    encoded = encode_batch(batch.table)
    headers = {
        "Content-Type": ARROW_STREAM,
        "Content-Encoding": "zstd",
        "X-Baml-Root-Id": batch.root_id,
        "X-Baml-Project-Id": scope.project,
        "X-Baml-Environment-Id": scope.environment,
        "X-Baml-Relation": batch.relation,
        "X-Baml-Partition": str(batch.partition),
        "X-Baml-Projection-Generation": generation,
        "X-Baml-Content-Digest": encoded.digest,
    }
    return BatchRequest(
        f"/projection-batches/{quote(batch.batch_id, safe='')}",
        headers,
        encoded.body,
        f"relation={batch.relation} batch_id={batch.batch_id}",
    )


class ControlClient:
    """Sync, thread-safe client of the workload API at ``base_url`` (``http://host:port`` or
    the spec's ``…/studio-data/v1``).

    ``client`` is a test seam and a way to share a pool (mTLS settings, event hooks); the
    client made otherwise is closed by :meth:`close`. ``sleep`` and ``rand`` are seams of the
    backoff; ``clock`` (monotonic seconds) ages the generation cache. ``max_connections``
    bounds the pooled connections (as many as batches sent at once; see
    ``WorkerConfig.batch_concurrency``).
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 30.0,
        retries: int = 4,
        backoff_s: float = 0.25,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 30.0,
        generation_ttl_s: float = 5.0,
        max_connections: int = 512,
        on_request: Callable[[SentRequest], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if retries < 0 or backoff_s < 0 or backoff_max_s < 0 or retry_after_max_s < 0:
            raise ValueError("retries and backoff bounds must not be negative")
        check_base_url(base_url, "control plane", "http(s)://host[:port][/path]")
        self._base = self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._token_source = token
        self._owns_client = client is None
        if client is None:
            limits = httpx.Limits(max_connections=max_connections)
            transport = httpx.HTTPTransport(limits=limits, socket_options=NODELAY)
            client = httpx.Client(timeout=timeout_s, limits=limits, transport=transport)
        self._http = client
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_max_s = retry_after_max_s
        self.generation_ttl_s = generation_ttl_s
        self._sleep = sleep
        self._rand = rand
        self._clock = clock
        self._lock = threading.Lock()
        self._schemas: dict[str, dict[str, Any]] = {}
        self._generations: dict[Scope, tuple[str, float]] = {}
        self.max_connections = max_connections
        self._on_request = on_request
        self._senders: ThreadPoolExecutor | None = None
        self._async_sender: AsyncBatchSender | None = None

    def close(self) -> None:
        with self._lock:
            senders, self._senders = self._senders, None
            async_sender, self._async_sender = self._async_sender, None
        if senders is not None:
            senders.shutdown(wait=True, cancel_futures=True)
        if async_sender is not None:
            async_sender.close()
        if self._owns_client:
            self._http.close()

    def _batch_sender(self) -> AsyncBatchSender:
        with self._lock:
            if self._async_sender is None:
                from baml_studio.projector.batch_sender import AsyncBatchSender

                self._async_sender = AsyncBatchSender(self)
            return self._async_sender

    def _sender_pool(self) -> ThreadPoolExecutor:
        """The threads every :meth:`put_batches` call shares (``max_connections`` of them):
        two projector threads sending at once share one bound, so the control plane and this
        process see at most ``max_connections`` batches in flight, not a pool per caller."""
        with self._lock:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(
                    min(self.max_connections, MAX_SENDER_THREADS), thread_name_prefix="control-put"
                )
            return self._senders

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reads ------------------------------------------------------------------------------

    def projection_schemas(self, catalog_version: str = "v1") -> dict[str, Any]:
        """The ``ProjectionSchemaSet`` of ``catalog_version`` (cached: static per version)."""
        with self._lock:
            cached = self._schemas.get(catalog_version)
        if cached is None:
            path = f"/projection-schemas/{quote(catalog_version, safe='')}"
            cached = _json_object(
                self._call("GET", path, "projection_schemas"), "projection_schemas"
            )
            if not isinstance(cached.get("relations"), list):
                raise _protocol("projection_schemas", "a ProjectionSchemaSet without relations")
            with self._lock:
                self._schemas[catalog_version] = cached
        return copy.deepcopy(cached)

    def snapshot(self, scope: Scope, catalog_version: str = "v1") -> dict[str, Any]:
        """A fresh ``QuerySnapshot`` of ``scope`` (``snapshot_id``, ``generation``, …)."""
        body = {
            "scope": {
                "tenant_id": scope.tenant,
                "project_id": scope.project,
                "environment_id": scope.environment,
            },
            "catalog_version": catalog_version,
        }
        data = _json_object(
            self._call("POST", "/query-snapshots", "snapshot", json_body=body), "snapshot"
        )
        _check_snapshot(data)
        return data

    def active_generation(self, scope: Scope, catalog_version: str = "v1") -> str:
        """The scope's active projection generation, from a snapshot; cached for
        ``generation_ttl_s`` (see :meth:`invalidate_generation`)."""
        now = self._clock()
        with self._lock:
            hit = self._generations.get(scope)
        if hit is not None and hit[1] > now:
            return hit[0]
        generation: str = self.snapshot(scope, catalog_version)["generation"]
        self._remember(scope, generation)
        return generation

    def invalidate_generation(self, scope: Scope) -> None:
        with self._lock:
            self._generations.pop(scope, None)

    def _remember(self, scope: Scope, generation: str) -> None:
        with self._lock:
            self._generations[scope] = (generation, self._clock() + self.generation_ttl_s)

    # -- writes -----------------------------------------------------------------------------

    def put_batch(self, scope: Scope, generation: str, batch: PublicBatchLike) -> BatchAck:
        """Send one public batch; returns once its rows are visible."""
        request = batch_request(scope, generation, batch)
        try:
            response = self._call(
                "PUT",
                request.path,
                "put_batch",
                headers=request.headers,
                content=request.body,
                context=request.context,
            )
        except InactiveGeneration as exc:
            self._inactive(scope, exc)
            raise
        return self._acked(request, response)

    def _inactive(self, scope: Scope, exc: InactiveGeneration) -> None:
        if exc.active_generation:
            self._remember(scope, exc.active_generation)

    def _acked(self, request: BatchRequest, response: httpx.Response) -> BatchAck:
        return self._acked_body(request, response.status_code, response.content)

    def _acked_body(self, request: BatchRequest, status: int, content: bytes) -> BatchAck:
        """The ack of a 2xx answer from its status and body."""
        ack = _batch_ack(status, content)
        log.debug(  # one a batch: the worker logs one line a message at INFO
            "projection batch %s status=%d rows=%d generation=%s",
            request.context,
            ack.status,
            ack.row_count,
            ack.generation,
        )
        return ack

    def put_batches(
        self,
        scope: Scope,
        generation: str,
        batches: Iterable[PublicBatchLike],
        *,
        concurrency: int = 4,
    ) -> list[BatchAck]:
        """Send ``batches`` up to ``concurrency`` at a time, on the threads all callers of
        this client share (at most ``max_connections`` in flight in all); acks in the order
        given. On the first failure the batches not yet started are not sent, and the error of
        the earliest failed batch is raised once the running ones finish."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        items = list(batches)
        if concurrency == 1 or len(items) <= 1:
            return [self.put_batch(scope, generation, batch) for batch in items]
        if self._owns_client:
            return self._batch_sender().put_all(scope, generation, items, concurrency)
        # at most ``concurrency`` of this call's batches queued in the shared pool at once
        slots = threading.BoundedSemaphore(concurrency)
        failed = threading.Event()
        futures = []

        def send(batch: PublicBatchLike) -> BatchAck:
            try:
                if failed.is_set():
                    raise NotSent()
                return self.put_batch(scope, generation, batch)
            except BaseException:
                failed.set()
                raise
            finally:
                slots.release()

        pool = self._sender_pool()
        for batch in items:
            slots.acquire()
            if failed.is_set():
                slots.release()
                break
            futures.append(pool.submit(send, batch))
        wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None and not isinstance(error, NotSent):
                raise error
        return [future.result() for future in futures]

    def erase_roots(
        self,
        scope: Scope,
        generation: str,
        root_ids: Sequence[str],
        idempotency_key: str,
    ) -> ErasureAck:
        """Delete the facts of ``root_ids`` in ``scope`` and ``generation``, 1,000 per request
        (duplicates dropped); each request's ``Idempotency-Key`` derives from
        ``idempotency_key`` and its chunk, so a repeated erasure sends the same keys."""
        if not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
            raise ValueError("idempotency_key must be 1–256 characters")
        unique = list(dict.fromkeys(root_ids))
        chunks = [unique[i : i + ERASURE_CHUNK] for i in range(0, len(unique), ERASURE_CHUNK)]
        deleted: list[str] = []
        for index, chunk in enumerate(chunks):
            headers = {
                "Idempotency-Key": _chunk_key(idempotency_key, index, len(chunks)),
                "X-Baml-Project-Id": scope.project,
                "X-Baml-Environment-Id": scope.environment,
            }
            body = {"root_ids": chunk, "generation": generation}
            data = _json_object(
                self._call(
                    "POST",
                    "/projection-erasures",
                    "erase_roots",
                    headers=headers,
                    json_body=body,
                    context=f"chunk={index + 1}/{len(chunks)} roots={len(chunk)}",
                ),
                "erase_roots",
            )
            roots = data.get("root_ids")
            if data.get("state") != "deleted" or not isinstance(roots, list):
                raise _protocol("erase_roots", "a ProjectionErasureResponse not 'deleted'")
            deleted.extend(str(r) for r in roots)
        return ErasureAck(generation, tuple(deleted), len(chunks))

    # -- transport --------------------------------------------------------------------------

    def _token(self) -> str:
        source = self._token_source
        return source() if callable(source) else source

    def _call(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        json_body: Any = None,
        context: str = "",
    ) -> httpx.Response:
        """One operation with its retries: the 2xx response, else one of the errors above."""
        attempts = Attempts(self, operation, context)
        if json_body is not None:
            content = json.dumps(json_body, separators=(",", ":")).encode("utf-8")
            headers = {"Content-Type": "application/json", **(headers or {})}
        while True:
            sent = attempts.headers(headers)
            self._observe(method, path, sent, content)
            try:
                response = self._http.request(
                    method, self._base + path, headers=sent, content=content
                )
            except httpx.HTTPError as exc:
                outcome: httpx.Response | float | None = attempts.failed(exc)
            else:
                outcome = attempts.answered(response)
            if isinstance(outcome, httpx.Response):
                return outcome
            if outcome is not None:
                self._sleep(outcome)

    def _observe(
        self, method: str, path: str, headers: Mapping[str, str], content: bytes | None
    ) -> None:
        if self._on_request is not None:
            self._on_request(
                SentRequest(
                    method, path, {k.lower(): v for k, v in headers.items()}, content or b""
                )
            )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.backoff_max_s, self.backoff_s * (1 << min(attempt, 30))) * self._rand()
        if retry_after is None:
            return backoff
        return max(backoff, min(retry_after, self.retry_after_max_s))


class Attempts:
    """The retry rules of one operation, shared by the blocking and the asyncio transport:
    :meth:`headers` for the next attempt; :meth:`answered` / :meth:`failed` return the 2xx
    response, a delay before the next attempt, ``None`` to retry at once (a refreshed token),
    or raise the operation's error."""

    def __init__(self, client: ControlClient, operation: str, context: str) -> None:
        self.client = client
        self.operation = operation
        self.context = context
        self.attempt = 0
        self.refreshed = False
        self.token = ""
        self.request_id = ""

    def headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        self.token = self.client._token()
        self.request_id = new_request_id()
        return {
            "Authorization": f"Bearer {self.token}",
            "X-Baml-Request-Id": self.request_id,
            "Accept": "application/json",
            **(extra or {}),
        }

    def failed(self, exc: BaseException) -> float:
        """A transport error (unreachable, timeout): the delay, or the error once spent."""
        log.warning(
            "control %s failed request_id=%s %s error=%s",
            self.operation,
            self.request_id,
            self.context,
            type(exc).__name__,
        )
        failure = ControlPlaneUnavailable(
            f"{self.operation}: the control plane is unreachable: {type(exc).__name__}: {exc} "
            f"(request_id={self.request_id})"
        )
        return self._next(failure, exc, None)

    def note(self, status: int) -> None:
        """The answer's status, logged (by :meth:`answered`, or by a caller that handles a
        2xx answer itself)."""
        log.debug(
            "control %s status=%d request_id=%s %s",
            self.operation,
            status,
            self.request_id,
            self.context,
        )

    def answered(self, response: httpx.Response) -> httpx.Response | float | None:
        status = response.status_code
        self.note(status)
        if status < 300:
            return response
        code, failure = _refusal(self.operation, response, self.request_id)
        log.warning(
            "control %s refused status=%d code=%s request_id=%s %s",
            self.operation,
            status,
            code,
            self.request_id,
            self.context,
        )
        client = self.client
        if status == 401 and callable(client._token_source) and not self.refreshed:
            self.refreshed = True
            if client._token() != self.token:
                return None
        if status not in RETRYABLE_STATUS:
            raise failure
        return self._next(failure, None, retry_after_seconds(response.headers.get("Retry-After")))

    def _next(
        self, failure: ProjectorError, cause: BaseException | None, retry_after: float | None
    ) -> float:
        if self.attempt >= self.client.retries:
            raise failure from cause
        delay = self.client._delay(self.attempt, retry_after)
        self.attempt += 1
        log.info(
            "control %s retry %d in %.2fs %s", self.operation, self.attempt, delay, self.context
        )
        return delay


@dataclass(frozen=True, slots=True)
class SentRequest:
    """What the client sent (the ``on_request`` hook's argument): lower-case header names."""

    method: str
    path: str
    headers: dict[str, str]
    content: bytes


class NotSent(Exception):
    """A batch of a :meth:`ControlClient.put_batches` call not sent after an earlier one
    failed (never raised to the caller: the earlier failure is)."""


def _chunk_key(key: str, index: int, count: int) -> str:
    if count == 1:
        return key
    suffix = f":{index + 1}/{count}"
    if len(key) + len(suffix) > MAX_IDEMPOTENCY_KEY:
        key = "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return key + suffix


def _error_of(response: httpx.Response) -> tuple[str, str, dict[str, Any]]:
    """``code``, ``message``, ``details`` of an ``ErrorResponse`` (placeholders otherwise)."""
    try:
        error = parse_json(response.content, ValueError)["error"]
        details = error.get("details")
        return (
            str(error["code"]),
            str(error["message"])[:500],
            details if isinstance(details, dict) else {},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"http_{response.status_code}", f"HTTP {response.status_code}", {}


def _refusal(
    operation: str, response: httpx.Response, request_id: str
) -> tuple[str, ProjectorError]:
    """The ``ErrorResponse`` code of a non-2xx answer, and the error it maps to."""
    status = response.status_code
    code, message, details = _error_of(response)
    text = f"{operation} answered {status} {code}: {message}"
    if details:
        text += f" details={json.dumps(details, sort_keys=True, default=str)[:MAX_DETAIL_CHARS]}"
    text += f" (request_id={request_id})"
    if status == 409 and code == "inactive_generation":
        active = details.get("active_generation")
        return code, InactiveGeneration(
            text, active_generation=active if isinstance(active, str) and active else None
        )
    if status in RETRYABLE_STATUS:
        return code, ControlPlaneUnavailable(text, status=status)
    if status in AUTH_STATUS:
        return code, ControlPlaneAuthRefused(text, status=status, code=code)
    if status in NOT_FOUND_STATUS:
        return code, ControlPlaneNotFound(text, status=status, code=code)
    return code, ControlPlaneRefused(text, status=status, code=code)


def _protocol(operation: str, problem: str) -> ControlPlaneUnavailable:
    """A 2xx whose body breaks the contract (a proxy page, a server bug): transient, so the
    message stays in the queue until it is fixed or dead-lettered by the retry limit."""
    return ControlPlaneUnavailable(f"{operation}: the control plane answered {problem}")


def _check_snapshot(data: dict[str, Any]) -> None:
    """A ``QuerySnapshot`` answer has what its readers take from it: ``snapshot_id``,
    ``generation`` and ``catalog_version`` as non-empty text and ``expires_at`` as a date-time
    with its offset; else the answer breaks the contract (:func:`_protocol`)."""
    for name in ("snapshot_id", "generation", "catalog_version"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise _protocol("snapshot", f"a QuerySnapshot without {name}")
    expires_at = data.get("expires_at")
    moment = None
    if isinstance(expires_at, str):
        with contextlib.suppress(ValueError):
            moment = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    if moment is None or moment.tzinfo is None:
        shown = repr(expires_at)[:80]
        raise _protocol("snapshot", f"a QuerySnapshot whose expires_at {shown} is not a date-time")


def _json_object(response: httpx.Response, operation: str) -> dict[str, Any]:
    return _json_body(response.status_code, response.content, operation)


def _json_body(status: int, content: bytes, operation: str) -> dict[str, Any]:
    try:
        data = parse_json(content, ValueError)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise _protocol(operation, f"{status} without a JSON object")
    return data


def _batch_ack(status: int, content: bytes) -> BatchAck:
    data = _json_body(status, content, "put_batch")
    try:
        ack = BatchAck(
            status=status,
            batch_id=_text(data["batch_id"]),
            root_id=_text(data["root_id"]),
            generation=_text(data["generation"]),
            row_count=_count(data["row_count"]),
            content_digest=_text(data["content_digest"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _protocol("put_batch", f"a ProjectionBatchResponse missing {exc}") from None
    if ack.status not in (200, 201) or data.get("state") != "visible":
        raise _protocol("put_batch", f"{ack.status} with state {data.get('state')!r}")
    return ack


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"row_count {value!r} is not a count")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


__all__ = [
    "BatchAck",
    "ControlClient",
    "ControlPlaneAuthRefused",
    "ControlPlaneNotFound",
    "ControlPlaneRefused",
    "ControlPlaneUnavailable",
    "EncodedBatch",
    "ErasureAck",
    "InactiveGeneration",
    "PublicBatchLike",
    "encode_batch",
    "new_request_id",
]
