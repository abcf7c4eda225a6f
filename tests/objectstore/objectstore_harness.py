"""Harnesses that put each object store adapter behind one interface for the conformance suite.

``StoreHarness.store`` is the adapter under test; the other members reach past the port only to
observe or to forge what the port forbids (a URL signed in the past, the versions left in S3).
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import uvicorn

from baml_studio.objectstore.asgi import AsgiApp, presigned_put_app
from baml_studio.objectstore.config import DirectoryBucketConfig, S3Config
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.port import ObjectStore, PresignedPut
from baml_studio.objectstore.s3 import S3ObjectStore
from ministack_fixture import CREDENTIALS, REGION

SECRET = b"0123456789abcdef0123456789abcdef"
SERVER_START_TIMEOUT_S = 10.0


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@dataclass
class HttpResult:
    status: int
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes


def _lower(items: Any) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in items}


def http_put(url: str, body: bytes, headers: dict[str, str]) -> HttpResult:
    """One PUT over a real socket; ``headers`` are sent as given (urllib adds Content-Length
    only when absent)."""
    request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return HttpResult(response.status, _lower(response.headers.items()), response.read())
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, _lower(exc.headers.items()), exc.read())


class MutableClock:
    """Wall clock with an adjustable offset (seconds)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class StoreHarness:
    kind: str
    store: ObjectStore
    presign_signed_at: Callable[[datetime, str, int, str, int], PresignedPut]
    """Presign as if the signer's clock read the given instant."""
    leftovers: Callable[[str], list[str]]
    """Whatever the backend still holds for a key (files, versions, delete markers)."""


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_asgi(app: AsgiApp, sock: socket.socket) -> Iterator[None]:
    """Run ``app`` under uvicorn on ``sock`` in a thread until the block exits."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(SERVER_START_TIMEOUT_S)
        sock.close()


class SwitchableApp:
    """An ASGI app that forwards to whichever app the current test installed."""

    def __init__(self) -> None:
        self.target: AsgiApp | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.target is None:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"no bucket installed"})
            return
        await self.target(scope, receive, send)


@contextmanager
def directory_harness(
    tmp_path: Path, base_url: str, switch: SwitchableApp
) -> Iterator[StoreHarness]:
    """A directory bucket under ``tmp_path`` whose presigned-PUT app serves at ``base_url``."""
    clock = MutableClock()
    config = DirectoryBucketConfig(
        root=tmp_path / "buckets",
        bucket="evidence-test",
        presign_base_url=base_url,
        signing_secret=SECRET,
    )
    store = DirectoryBucket(config, clock=clock)

    def presign_signed_at(
        at: datetime, key: str, size: int, sha256: str, expires_in: int
    ) -> PresignedPut:
        clock.offset = at.timestamp() - time.time()  # ``at`` is timezone-aware
        try:
            return store.presign_put(key, size, sha256, expires_in)
        finally:
            clock.offset = 0.0

    def leftovers(key: str) -> list[str]:
        found = [store.path / tree / key for tree in ("objects", "meta")]
        return [str(path) for path in found if path.exists()]

    switch.target = presigned_put_app(store)
    try:
        yield StoreHarness("directory", store, presign_signed_at, leftovers)
    finally:
        switch.target = None


def s3_store_config(endpoint: str, bucket: str) -> S3Config:
    return S3Config(
        bucket=bucket,
        region=REGION,
        endpoint_url=endpoint,
        access_key_id=CREDENTIALS["aws_access_key_id"],
        secret_access_key=CREDENTIALS["aws_secret_access_key"],
        max_attempts=2,
    )


def s3_harness(endpoint: str, bucket: str, raw: Any) -> StoreHarness:
    """An S3 store over a fresh versioned bucket on ministack, sharing the boto3 client ``raw``
    (a client takes about 0.1 s to build)."""
    store = S3ObjectStore(s3_store_config(endpoint, bucket), client=raw)
    store.ensure_bucket(versioning=True)

    def presign_signed_at(
        at: datetime, key: str, size: int, sha256: str, expires_in: int
    ) -> PresignedPut:
        naive_utc = at.astimezone(UTC).replace(tzinfo=None)  # botocore's clock is naive UTC
        with mock.patch("botocore.auth.get_current_datetime", return_value=naive_utc):
            return store.presign_put(key, size, sha256, expires_in)

    def leftovers(key: str) -> list[str]:
        page = raw.list_object_versions(Bucket=bucket, Prefix=key)
        entries = [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        return [entry["VersionId"] for entry in entries if entry["Key"] == key]

    return StoreHarness("s3", store, presign_signed_at, leftovers)


def past(seconds: float) -> datetime:
    """The UTC instant ``seconds`` ago."""
    return datetime.now(UTC) - timedelta(seconds=seconds)
