"""A small fake of the data-plane gateway for publisher tests: the two publisher operations of
openapi.yaml over a DirectoryBucket, plus its presigned PUT route, served by uvicorn on
127.0.0.1. It records every stored PUT in order and can drop a PUT's response after storing."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import uvicorn

from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import ObjectNotFound
from baml_studio.objectstore.presign import PATH_PREFIX

PREFIX = "evidence/v1/tn_test/prj_test/env_test/"
DEFAULT_CONFIG: dict[str, Any] = {
    "capture_enabled": True,
    "supported_segment_versions": [2],
    "supported_cas_versions": [1],
    "flush_interval_seconds": 5,
    "max_objects_per_authorize": 100,
    "large_value_threshold_bytes": 32768,
    "max_object_bytes": 268435456,
    "pack_max_entry_bytes": 8388608,
    "shipped_value_retention_seconds": 3600,
    "upload_url_ttl_seconds": 900,
}


def expected_key(entry: dict[str, Any], euid: str, flush_id: str) -> str:
    kind = entry["kind"]
    if kind == "meta_segment":
        return f"{PREFIX}streams/{euid}/meta/{entry['sequence']:020d}.bamlmeta.zst"
    if kind == "data_segment":
        return f"{PREFIX}streams/{euid}/data/{entry['sequence']:020d}.bamldata.zst"
    if kind == "value_pack":
        return f"{PREFIX}streams/{euid}/values/{flush_id}.bamlpack.zst"
    digest = entry["cid"].removeprefix("bamlv_1_")
    family, ext = ("values", "bamlvalue") if kind == "value" else ("tables", "bamltable")
    return f"{PREFIX}cas/{family}/{digest[:2]}/{digest}.{ext}.zst"


@dataclass
class FakeGateway:
    bucket: DirectoryBucket
    tokens: set[str]
    config: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_CONFIG))
    puts: list[str] = field(default_factory=list)
    """Keys stored by presigned PUTs, in order."""
    authorize_calls: list[dict[str, Any]] = field(default_factory=list)
    drop_response_for: set[str] = field(default_factory=set)
    """Key suffixes whose next PUT is stored and then answered 500 (the response is 'lost')."""
    status_override: tuple[int, dict[str, str]] | None = None
    hold_put_suffix: str | None = None
    """A PUT whose key ends with this waits for ``release`` and then fails without storing."""
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if (
            self.hold_put_suffix
            and scope["method"] == "PUT"
            and (scope["path"].endswith(self.hold_put_suffix))
        ):
            self.held.set()
            await asyncio.to_thread(self.release.wait, 30)
            status, out_headers, out = 500, {}, b"held"
        else:
            status, out_headers, out = self.handle(scope, headers, body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in out_headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": out})

    def handle(
        self, scope: Any, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        path, method = scope["path"], scope["method"]
        if path.startswith(PATH_PREFIX) and method == "PUT":
            return self._put(scope, headers, body)
        if self.status_override is not None:
            status, extra = self.status_override
            return _error(status, "overridden", extra)
        if headers.get("authorization", "").removeprefix("Bearer ") not in self.tokens:
            return _error(401, "unauthenticated")
        if path == "/v1/publisher/config" and method == "GET":
            return 200, {"content-type": "application/json"}, json.dumps(self.config).encode()
        if path == "/v1/uploads/authorize" and method == "POST":
            return self._authorize(json.loads(body))
        return _error(404, "not_found")

    def _authorize(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        self.authorize_calls.append(request)
        if len(request["objects"]) > self.config["max_objects_per_authorize"]:
            return _error(413, "too_many_objects")
        answers = []
        for entry in request["objects"]:
            key = expected_key(entry, request["process_euid"], request["flush_id"])
            answer: dict[str, Any] = {"kind": entry["kind"], "key": key}
            for name in ("sequence", "cid"):
                if name in entry:
                    answer[name] = entry[name]
            try:
                info = self.bucket.head(key)
            except ObjectNotFound:
                signed = self.bucket.presign_put(
                    key, entry["size_bytes"], entry["checksum_sha256"], 900
                )
                answer |= {
                    "state": "upload_required",
                    "upload_url": signed.url,
                    "required_headers": dict(signed.required_headers),
                    "expires_at": signed.expires_at.isoformat(),
                }
            else:
                same = info.sha256 == entry["checksum_sha256"]
                answer["state"] = "stored" if same else "conflict"
            answers.append(answer)
        body = {"flush_id": request["flush_id"], "objects": answers}
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    def _put(
        self, scope: Any, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        bucket, _, key = scope["path"][len(PATH_PREFIX) :].partition("/")
        query = dict(parse_qsl(scope["query_string"].decode(), keep_blank_values=True))
        response = self.bucket.handle_presigned_put(bucket, key, query, headers, body)
        if response.status == 200:
            self.puts.append(key)
            for suffix in list(self.drop_response_for):
                if key.endswith(suffix):
                    self.drop_response_for.discard(suffix)
                    return 500, {}, b"lost"
        return response.status, response.headers, response.body


def _error(
    status: int, code: str, extra: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    body = {"error": {"code": code, "message": code, "request_id": "r", "retryable": False,
                      "details": {}}}  # fmt: skip
    return status, {"content-type": "application/json", **(extra or {})}, json.dumps(body).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_fake(app: Any, port: int) -> Iterator[str]:
    """uvicorn on 127.0.0.1:port in a thread; yields the base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def make_bucket(root: Path, port: int) -> DirectoryBucket:
    config = DirectoryBucketConfig(
        root=root, bucket="evidence-test", presign_base_url=f"http://127.0.0.1:{port}",
        signing_secret=b"s" * 32,
    )  # fmt: skip
    return DirectoryBucket(config)
