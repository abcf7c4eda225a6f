"""Mutual TLS: a real uvicorn server on 127.0.0.1 with throwaway certificates."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from baml_studio.control.tls import TlsConfigError, client_ssl_context, server_ssl_options
from tls_authority import Authority

START_TIMEOUT_S = 10.0


@dataclass
class TlsServer:
    url: str
    calls: list[str]


@contextmanager
def serve_tls(options: dict[str, Any]) -> Iterator[TlsServer]:
    """A trivial Starlette app under uvicorn with ``options`` on a free 127.0.0.1 port."""
    calls: list[str] = []

    async def hello(request: Request) -> PlainTextResponse:
        calls.append(request.url.path)
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/hello", hello)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="critical", lifespan="off", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
    try:
        yield TlsServer(f"https://127.0.0.1:{sock.getsockname()[1]}", calls)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    ours = Authority(tmp_path, "ours")
    theirs = Authority(tmp_path, "theirs")
    return {
        "ca": ours.path,
        "client": ours.issue("workload", server=False),
        "foreign_client": theirs.issue("workload", server=False),
        "server_cert": ours.issue("control", server=True),
    }


def get(url: str, context: ssl.SSLContext) -> httpx.Response:
    with httpx.Client(verify=context, timeout=5) as client:
        return client.get(url + "/hello")


def test_mutual_tls_admits_only_clients_of_the_client_ca(pki: dict[str, Any]) -> None:
    server = pki["server_cert"]
    options = server_ssl_options(server.cert, server.key, pki["ca"])
    assert options["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    with serve_tls(options) as running:
        client = pki["client"]
        ok = get(running.url, client_ssl_context(pki["ca"], client.cert, client.key))
        assert ok.status_code == 200 and ok.text == "hello"
        assert running.calls == ["/hello"]
        with pytest.raises(httpx.TransportError):
            get(running.url, client_ssl_context(pki["ca"]))
        foreign = pki["foreign_client"]
        with pytest.raises(httpx.TransportError):
            get(running.url, client_ssl_context(pki["ca"], foreign.cert, foreign.key))
        assert running.calls == ["/hello"]


def test_server_tls_without_client_ca_admits_any_client(pki: dict[str, Any]) -> None:
    server = pki["server_cert"]
    options = server_ssl_options(server.cert, server.key, None)
    assert "ssl_cert_reqs" not in options and "ssl_ca_certs" not in options
    with serve_tls(options) as running:
        assert get(running.url, client_ssl_context(pki["ca"])).status_code == 200
        foreign_ca = pki["foreign_client"].cert.parent / "theirs-ca.pem"
        with pytest.raises(httpx.ConnectError):
            get(running.url, client_ssl_context(foreign_ca))


def test_tls_files_are_checked(tmp_path: Path, pki: dict[str, Any]) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(TlsConfigError, match=r"missing\.pem"):
        server_ssl_options(missing, pki["client"].key, None)
    with pytest.raises(TlsConfigError, match="client CA"):
        server_ssl_options(pki["server_cert"].cert, pki["server_cert"].key, missing)
    with pytest.raises(TlsConfigError, match="both"):
        client_ssl_context(pki["ca"], pki["client"].cert, None)
    with pytest.raises(TlsConfigError):
        client_ssl_context(pki["ca"], pki["client"].cert, pki["foreign_client"].key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(TlsConfigError):
        client_ssl_context(garbage)
