"""A gateway under test, over either adapter family, served by uvicorn on 127.0.0.1.

``GatewayRig`` holds an ``httpx.Client`` for the gateway, the object store, the projection queue
(directory family only), the key ring file and helpers to mint tokens and build flushes.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from baml_studio.gateway.app import AsgiApp, create_app
from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import GatewayConfig, Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.service import DataplaneConfig, open_dataplane
from baml_studio.gateway.tokens import KeyRingFile, PublisherTokenVerifier, mint_publisher_token
from baml_studio.objectstore.config import S3Config
from baml_studio.objectstore.port import ObjectStore
from baml_studio.objectstore.s3 import S3ObjectStore
from baml_studio.queue.sqlite import SqliteQueue
from ministack_fixture import CREDENTIALS, REGION

SCOPE = Scope("tn_acme", "prj_billing", "env_prod")
EUID = "3f9c2b7e1a4d4c8e9b0f1e2d3c4b5a69"
FLUSH_ID = "01J8ZK3V5N4Q2W8X7Y6T5R4E3D"
CID_VALUE = "bamlv_1_" + "ab" * 32
CID_TABLE = "bamlv_1_" + "cd" * 32
START_TIMEOUT_S = 10.0


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def body_of(tag: str, size: int = 300) -> bytes:
    """Deterministic stand-in bytes for one object (the gateway never reads them)."""
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def entry(kind: str, data: bytes, **extra: Any) -> dict[str, Any]:
    """One authorize entry for ``data``."""
    return {"kind": kind, "size_bytes": len(data), "checksum_sha256": sha(data), **extra}


def five_kinds() -> list[tuple[dict[str, Any], bytes]]:
    """One object of each kind with its bytes."""
    items = [
        ("table", {"cid": CID_TABLE, "codec": 2}),
        ("value", {"cid": CID_VALUE, "codec": 1}),
        ("value_pack", {"entry_count": 3}),
        ("data_segment", {"sequence": 1}),
        ("meta_segment", {"sequence": 1}),
    ]
    out = []
    for kind, extra in items:
        data = body_of(kind)
        out.append((entry(kind, data, **extra), data))
    return out


def request_body(objects: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"process_euid": EUID, "flush_id": FLUSH_ID, "objects": objects, **extra}


@dataclass
class PutResult:
    status: int
    body: bytes


def http_put(url: str, data: bytes, headers: Mapping[str, str]) -> PutResult:
    """One PUT over a real socket with exactly ``headers``."""
    request = urllib.request.Request(url, data=data, method="PUT", headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return PutResult(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return PutResult(exc.code, exc.read())


@contextmanager
def serve(app: AsgiApp, sock: socket.socket) -> Iterator[str]:
    """Run ``app`` under uvicorn on ``sock`` in a thread; yield its base URL."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class GatewayRig:
    kind: str
    http: httpx.Client
    store: ObjectStore
    queue: SqliteQueue | None
    keys: KeyRingFile
    gateway: Gateway

    def token(self, scope: Scope = SCOPE, ttl: int = 600, now: float | None = None) -> str:
        return mint_publisher_token(self.keys.load(), scope, ttl, now=now)

    def headers(self, token: str | None = None, **extra: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {token or self.token()}",
            "X-Baml-Request-Id": f"req-{os.urandom(4).hex()}",
            **extra,
        }

    def authorize(self, body: Any, token: str | None = None, **headers: str) -> httpx.Response:
        return self.http.post(
            "/v1/uploads/authorize", json=body, headers=self.headers(token, **headers)
        )


@contextmanager
def directory_rig(tmp_path: Path, gateway: GatewayConfig | None = None) -> Iterator[GatewayRig]:
    """``serve dataplane``'s wiring: directory bucket + SQLite queue under ``tmp_path``."""
    sock = bound_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = DataplaneConfig(
        data_dir=tmp_path / "dp", public_base_url=base, gateway=gateway or GatewayConfig()
    )
    dataplane = open_dataplane(config)
    dataplane.environments.add(SCOPE)
    try:
        with serve(dataplane.app, sock) as url, httpx.Client(base_url=url, timeout=10) as http:
            yield GatewayRig(
                "directory",
                http,
                dataplane.store,
                dataplane.queue,
                dataplane.keys,
                dataplane.gateway,
            )
    finally:
        dataplane.close()


@contextmanager
def s3_rig(tmp_path: Path, endpoint: str, bucket: str, raw: Any) -> Iterator[GatewayRig]:
    """The gateway over S3 on ministack (a fresh versioned bucket)."""
    config = S3Config(
        bucket=bucket,
        region=REGION,
        endpoint_url=endpoint,
        access_key_id=CREDENTIALS["aws_access_key_id"],
        secret_access_key=CREDENTIALS["aws_secret_access_key"],
        max_attempts=2,
    )
    store = S3ObjectStore(config, client=raw)
    store.ensure_bucket(versioning=True)
    keys = KeyRingFile(tmp_path / "keys.json")
    keys.load_or_create()
    environments = EnvironmentsFile(tmp_path / "environments.json")
    environments.add(SCOPE)
    gateway = Gateway(store, PublisherTokenVerifier(keys.load), environments, GatewayConfig())
    with (
        serve(create_app(gateway), bound_socket()) as url,
        httpx.Client(base_url=url, timeout=10) as http,
    ):
        yield GatewayRig("s3", http, store, None, keys, gateway)
