"""Public batches sent on one asyncio thread (:mod:`.http1`): many in flight, little CPU each.

:meth:`ControlClient.put_batches` hands its batches here when the client owns its HTTP
connections. The control plane coalesces the batches that wait at the same time into one
ledger lookup and one ClickHouse insert per relation, so the more batches are in flight, the
fewer inserts per batch; a thread per batch in flight (the blocking transport) costs the
projector about a millisecond of CPU per request and stops scaling past a few dozen threads,
while one event loop holds hundreds (measured: httpx with 64 threads 1.2 ms of client CPU
per request; aiohttp 0.12-0.14 ms at 64 and at 256 in flight, 0.25-0.3 ms on a later day's
machine; the :mod:`.http1` client 0.06 ms on that machine).

Every request follows the same rules as the blocking transport (:class:`Attempts`: retries
with backoff and ``Retry-After``, a refreshed token after a 401, errors by status) and passes
the client's ``on_request`` hook. The loop runs on a daemon thread started on first use and
stopped by :meth:`close`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import (
    Attempts,
    BatchAck,
    BatchRequest,
    PublicBatchLike,
    batch_request,
)
from baml_studio.projector.errors import InactiveGeneration
from baml_studio.projector.http1 import Http1Pool

if TYPE_CHECKING:
    from baml_studio.projector.control_client import ControlClient


class AsyncBatchSender:
    """An event loop thread and one :class:`Http1Pool` of at most ``max_connections``."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._pool: Http1Pool | None = None
        self._thread = threading.Thread(target=self._run, name="control-batches", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    async def _open(self) -> Http1Pool:
        if self._pool is None:
            client = self.client
            self._pool = Http1Pool(
                client.base_url,
                max_connections=client.max_connections,
                timeout_s=client.timeout_s,
                # the blocking transport's default verification (httpx: certifi's roots)
                ssl_context=httpx.create_ssl_context()
                if client.base_url.startswith("https:")
                else None,
            )
        return self._pool

    def put_all(
        self,
        scope: Scope,
        generation: str,
        batches: Sequence[PublicBatchLike],
        concurrency: int,
    ) -> list[BatchAck]:
        """What :meth:`ControlClient.put_batches` promises: acks in order; on the first
        failure no further batch starts and the earliest failed batch's error is raised once
        the running ones finish."""
        requests = [batch_request(scope, generation, batch) for batch in batches]
        future = asyncio.run_coroutine_threadsafe(
            self._put_all(scope, requests, concurrency), self._loop
        )
        return future.result()

    async def _put_all(
        self, scope: Scope, requests: list[BatchRequest], concurrency: int
    ) -> list[BatchAck]:
        """``concurrency`` senders (at most one per request) take the requests in order from
        one iterator: no task and no semaphore per request (a task per batch behind a
        semaphore cost ~0.015 ms more of the projector's CPU a batch:
        ``benchmarks/batch_route.py``, client ms/batch)."""
        pool = await self._open()
        acks: list[BatchAck | None] = [None] * len(requests)
        errors: dict[int, BaseException] = {}
        todo = iter(enumerate(requests))

        async def sender() -> None:
            for index, request in todo:  # one iterator shared by the senders
                try:
                    acks[index] = await self._put(pool, scope, request)
                except BaseException as exc:  # the earliest index is raised below
                    errors[index] = exc
                    return
                if errors:  # no batch starts after a failure
                    return

        await asyncio.gather(*(sender() for _ in range(min(concurrency, len(requests)))))
        if errors:
            raise errors[min(errors)]
        done = [ack for ack in acks if ack is not None]
        if len(done) != len(requests):
            raise RuntimeError("a batch was not sent, yet no batch failed")
        return done

    async def _put(self, pool: Http1Pool, scope: Scope, request: BatchRequest) -> BatchAck:
        client = self.client
        attempts = Attempts(client, "put_batch", request.context)
        while True:
            sent = attempts.headers(request.headers)
            client._observe("PUT", request.path, sent, request.body)
            try:
                answer = await pool.request("PUT", request.path, sent, request.body)
                if answer.status < 300:  # the common case: no httpx.Response to build
                    attempts.note(answer.status)
                    return client._acked_body(request, answer.status, answer.content)
                response = httpx.Response(
                    answer.status, headers=answer.headers, content=answer.content
                )
            except (TimeoutError, OSError) as exc:
                outcome: httpx.Response | float | None = attempts.failed(exc)
            else:
                try:
                    outcome = attempts.answered(response)
                except InactiveGeneration as exc:
                    client._inactive(scope, exc)
                    raise
            if isinstance(outcome, httpx.Response):
                return client._acked(request, outcome)
            if outcome is not None:
                await asyncio.sleep(outcome)

    def close(self) -> None:
        """Close the connections and stop the loop thread."""

        async def shut() -> None:
            if self._pool is not None:
                self._pool.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()
