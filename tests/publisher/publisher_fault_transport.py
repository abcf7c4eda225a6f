"""Fault injection for publisher tests through ``GatewayClient``'s ``transport`` seam: count
presigned PUTs per object key, lose exactly one PUT's response after the object was stored, or
hold one PUT (after it landed) so a test can SIGKILL the process mid-flush. It also records each
authorize call (objects sent, status, error code) and can answer the next config read with
stale limits (the real answer with some fields replaced), as if the gateway's limits changed
after the publisher last read them.

``python publisher_fault_transport.py STORE URL TOKEN LOG [HOLD_SUFFIX MARKER]`` runs one flush
in a fresh process, appending each landed key to LOG; with HOLD_SUFFIX it performs the first PUT
whose key ends so, logs it, touches MARKER and blocks forever. It prints the report as JSON."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx

import baml_studio.publisher.publisher as publisher_module
from baml_studio.publisher.client import GatewayClient

KEY_ROOT = "evidence/v1/"
CONFIG_PATH = "/v1/publisher/config"
AUTHORIZE_PATH = "/v1/uploads/authorize"


@dataclass(frozen=True)
class AuthorizeCall:
    """One ``POST /v1/uploads/authorize`` as the gateway answered it."""

    objects: int
    status: int
    code: str | None
    """``error.code`` of an error answer."""


def key_of(url: httpx.URL) -> str:
    """The object key of a presigned PUT URL (directory bucket or path-style S3)."""
    path = unquote(url.path)
    at = path.find(KEY_ROOT)
    return path[at:] if at >= 0 else path


class FaultTransport(httpx.BaseTransport):
    """A real HTTP transport that records every PUT and can lose or hold exactly one."""

    def __init__(
        self,
        *,
        lose_response_suffix: str | None = None,
        hold_suffix: str | None = None,
        marker: Path | None = None,
        log: Path | None = None,
    ) -> None:
        self._inner = httpx.HTTPTransport(limits=httpx.Limits(max_connections=16))
        self._lock = threading.Lock()
        self.lose_response_suffix = lose_response_suffix
        self.hold_suffix, self.marker, self.log = hold_suffix, marker, log
        self.puts: list[str] = []
        """Keys of every PUT sent, in order (including the one whose response was lost)."""
        self.lost: str | None = None
        self.authorizations: list[AuthorizeCall] = []
        self.config_reads = 0
        self.stale_config: dict[str, Any] | None = None
        """Fields that replace the gateway's in the next config answer (then cleared)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith(CONFIG_PATH):
            return self._config(request)
        if request.method == "POST" and request.url.path.endswith(AUTHORIZE_PATH):
            return self._authorize(request)
        if request.method != "PUT":
            return self._inner.handle_request(request)
        key = key_of(request.url)
        with self._lock:
            self.puts.append(key)
            lose = self._take(key, "lose_response_suffix")
            hold = self._take(key, "hold_suffix")
        response = self._inner.handle_request(request)
        response.read()
        response.close()
        if self.log is not None and response.status_code in (200, 201, 204):
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (key + "\n").encode())
            finally:
                os.close(fd)
        if hold:
            assert self.marker is not None
            staged = self.marker.with_name(self.marker.name + ".tmp")
            staged.write_text(key)
            os.replace(staged, self.marker)  # the parent never sees a half-written marker
            while True:
                time.sleep(60)  # the parent SIGKILLs this process here
        if lose:
            self.lost = key
            raise httpx.ReadError("injected: the response was lost", request=request)
        return response

    def _config(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        body = response.read()
        response.close()
        with self._lock:
            self.config_reads += 1
            stale, self.stale_config = self.stale_config, None
        if stale is None or response.status_code != 200:
            return _replay(response, body)
        return httpx.Response(200, json=json.loads(body) | stale, request=request)

    def _authorize(self, request: httpx.Request) -> httpx.Response:
        objects = len(json.loads(request.content)["objects"])
        response = self._inner.handle_request(request)
        body = response.read()
        response.close()
        code = None
        if response.status_code >= 400:
            code = json.loads(body)["error"]["code"]
        with self._lock:
            self.authorizations.append(AuthorizeCall(objects, response.status_code, code))
        return _replay(response, body)

    def _take(self, key: str, attribute: str) -> bool:
        suffix = getattr(self, attribute)
        if suffix is None or not key.endswith(suffix):
            return False
        setattr(self, attribute, None)  # exactly one PUT
        return True

    def counts(self) -> Counter[str]:
        return Counter(self.puts)

    def close(self) -> None:
        self._inner.close()


def _replay(response: httpx.Response, body: bytes) -> httpx.Response:
    """A read response again (``body`` is decoded: its encoding and length headers go)."""
    dropped = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in response.headers.items() if k.lower() not in dropped]
    return httpx.Response(response.status_code, headers=headers, content=body)


def client_class(transport: httpx.BaseTransport) -> type[GatewayClient]:
    """A ``GatewayClient`` that always uses ``transport`` (to patch into the publisher module)."""

    class FaultClient(GatewayClient):
        def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
            super().__init__(base_url, token, timeout=timeout, transport=transport)

    return FaultClient


def install(transport: httpx.BaseTransport) -> None:
    """Make every ``Publisher`` built from now on in this process use ``transport``."""
    publisher_module.GatewayClient = client_class(transport)  # type: ignore[attr-defined]


def _main(argv: list[str]) -> None:
    from baml_studio.publisher import Publisher

    store, url, token, log = argv[:4]
    hold, marker = (argv[4], Path(argv[5])) if len(argv) > 5 else (None, None)
    transport = FaultTransport(hold_suffix=hold, marker=marker, log=Path(log))
    install(transport)
    report: Any = Publisher(Path(store), url, token).flush()
    out = {"complete": report.complete, "uploaded": report.uploaded, "stored": report.stored}
    print(json.dumps(out | {"puts": transport.puts, "problems": [str(p) for p in report.problems]}))


if __name__ == "__main__":
    _main(sys.argv[1:])
