"""A small HTTP/1.1 client for many small requests from one event loop: the projector's
public batch PUTs.

The projector sends one ``PUT /projection-batches/{id}`` per execution, relation and partition
(about 50,000 for 100,000 calls), each a few KiB, hundreds in flight from one asyncio thread.
aiohttp's request machinery cost ~0.25-0.3 ms of CPU a request here; this client writes the
request line, the headers and the body in one ``transport.write``, parses the answer with
httptools' C parser (llhttp, the parser uvicorn serves with) and costs ~0.06 ms
(``benchmarks/batch_route.py`` and ``docs/benchmarks.md``).

What it does: keep-alive connections, at most ``max_connections`` of them, reused in LIFO order;
``Content-Length`` and chunked answers, and answers delimited by the connection's close; TLS
with a given :class:`ssl.SSLContext`; one deadline (``timeout_s``) per request, connecting
included. A request that finds its reused connection closed by the server before any byte
of an answer (an idle keep-alive connection the server dropped) is sent again on another
connection, as other clients do for idempotent methods; every operation sent through it is
idempotent (a batch PUT repeats with the same id and digest). What it leaves out: redirects,
proxies, cookies, ``Expect: 100-continue``, HTTP/2.

Errors: a failed connection, a connection closed before a complete answer, or an answer that
is not HTTP raises :class:`HttpTransportError` (an :class:`OSError`); the deadline raises
:class:`TimeoutError`. The connection is then closed, never reused.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class HttpTransportError(OSError):
    """No complete HTTP answer: the connection failed or closed early, or the bytes were not
    an HTTP/1.1 response."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete response: status, headers as sent (lower-case names), body."""

    status: int
    headers: list[tuple[str, str]]
    content: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed as bytes arrive."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._framed = False  # the answer declared its length (Content-Length or chunked)
        self._headers_done = False
        self.received = False  # any byte of the current answer
        self.keep_alive = False
        self.closed = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes nobody asked for: the connection's state is unknown
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(HttpTransportError("the server switched protocols; HTTP/1.1 expected"))
        except httptools.HttpParserError as exc:
            self._fail(HttpTransportError(f"the answer is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers_done and not self._framed:  # RFC 9112 §6.3: the close ends the body
            self.keep_alive = False
            waiter.set_result(self._answer())
            return
        error = HttpTransportError("the connection closed before a complete answer")
        if exc is not None:
            error.__cause__ = exc
        waiter.set_exception(error)

    # -- httptools callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.decode("latin-1").lower()
        if lower in ("content-length", "transfer-encoding"):
            self._framed = True
        self._headers.append((lower, value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self.keep_alive = self._parser.should_keep_alive()
            waiter.set_result(self._answer())

    # -- the client side -------------------------------------------------------------------

    def _answer(self) -> Answer:
        status = self._parser.get_status_code()
        return Answer(status, self._headers, b"".join(self._body))

    def send(self, head: bytes, body: bytes) -> asyncio.Future[Answer]:
        """Write one request; the future settles with its answer."""
        if self._transport is None or self.closed:
            raise HttpTransportError("the connection is closed")
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self._headers, self._body = [], []
        self._framed = self._headers_done = self.received = False
        self._transport.write(head + body)
        return waiter

    def _fail(self, error: HttpTransportError) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to one origin, used from one event loop."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http(s)://host[:port][/path], got {base_url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        default_port = self._port == (443 if self._tls else 80)
        name = f"[{self._host}]" if ":" in self._host else self._host
        self._authority = name if default_port else f"{name}:{self._port}"
        self._prefix = parts.path.rstrip("/")
        self._ssl = (ssl_context or ssl.create_default_context()) if self._tls else None
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    def head(self, method: str, path: str, headers: Mapping[str, str], length: int) -> bytes:
        """The request line and headers of one request, ``path`` already percent-encoded.
        A value or a path with a line break or a character outside Latin-1 is refused."""
        lines = [
            f"{method} {self._prefix}{path} HTTP/1.1\r\nHost: {self._authority}\r\n"
            f"Content-Length: {length}\r\n"
        ]
        for name, value in headers.items():
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by the client, not by its caller")
            lines.append(f"{name}: {value}\r\n")
        lines.append("\r\n")
        text = "".join(lines)
        # each line ends in exactly one CRLF: a CR or LF anywhere else would split a header
        # (request smuggling); a space in the path would break the request line
        if (
            text.count("\n") != len(headers) + 4
            or text.count("\r") != len(headers) + 4
            or " " in path
        ):
            raise ValueError(f"a header value or the path {path!r} holds a line break or space")
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValueError(f"a header value is not Latin-1: {exc}") from None

    async def request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes = b""
    ) -> Answer:
        """Send one request and wait for its complete answer (see the module docstring)."""
        head = self.head(method, path, headers, len(body))
        async with self._slots, asyncio.timeout(self.timeout_s):
            while True:
                connection, reused = await self._connection()
                try:
                    answer = await connection.send(head, body)
                except HttpTransportError:
                    self._drop(connection)
                    if reused and not connection.received:
                        continue  # a stale keep-alive connection: try the next one
                    raise
                except BaseException:  # cancelled or timed out mid-exchange
                    self._drop(connection)
                    raise
                if connection.keep_alive and not connection.closed:
                    self._idle.append(connection)
                else:
                    self._drop(connection)
                return answer

    async def _connection(self) -> tuple[_Connection, bool]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._tls else None,
            )
        except OSError as exc:  # refused, unreachable, TLS verification (ssl.SSLError)
            raise HttpTransportError(
                f"cannot connect to {self._authority}: {type(exc).__name__}: {exc}"
            ) from exc
        self._open.add(connection)
        return connection, False

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    def close(self) -> None:
        """Close every connection (call from the loop, once no request is running)."""
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()
