"""A minimal ASGI app serving only ``PUT /bucket/{bucket}/{key:path}`` for one directory bucket.

The gateway mounts :func:`~baml_studio.objectstore.presigned_http.handle_presigned_put` itself;
this app lets the directory bucket be exercised over real HTTP on its own (tests, a bare
uploader endpoint). The blocking work (hashing, fsync) runs on the app's own thread pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.presign import PATH_PREFIX
from baml_studio.objectstore.presigned_http import HttpResponse, s3_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


PUT_THREADS = 16
"""Threads serving puts at once. A put mostly waits at its durability barriers, which the puts
in flight share, so allow more than asyncio's default executor (CPUs + 4 threads) would."""


def presigned_put_app(
    store: DirectoryBucket, *, max_body_bytes: int = 256 << 20, threads: int = PUT_THREADS
) -> AsgiApp:
    """The ASGI app; bodies over ``max_body_bytes`` are refused with 400 ``EntityTooLarge``.
    Puts run on a pool of ``threads`` threads, started on the first put."""
    pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="bucket-put")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        response = await _serve(store, scope, receive, max_body_bytes, pool)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in response.headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": response.body})

    return app


async def _serve(
    store: DirectoryBucket,
    scope: Scope,
    receive: Receive,
    max_body_bytes: int,
    pool: ThreadPoolExecutor,
) -> HttpResponse:
    path: str = scope["path"]
    if not path.startswith(PATH_PREFIX):
        return s3_error(404, "NoSuchKey", f"no route for {path}", path)
    bucket, _, key = path[len(PATH_PREFIX) :].partition("/")
    if scope["method"] != "PUT":
        return s3_error(405, "MethodNotAllowed", "only presigned PUT is served here", path)
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    if "content-length" not in headers:
        return s3_error(411, "MissingContentLength", "send Content-Length", path)
    query = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
    body = await _read_body(receive, max_body_bytes)
    if body is None:
        message = f"body exceeds {max_body_bytes} bytes"
        return s3_error(400, "EntityTooLarge", message, path)
    put = partial(store.handle_presigned_put, bucket, key, query, headers, body)
    return await asyncio.get_running_loop().run_in_executor(pool, put)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk: bytes = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
