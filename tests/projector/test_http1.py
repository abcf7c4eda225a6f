"""The projector's HTTP/1.1 client (:mod:`baml_studio.projector.http1`) against raw asyncio
servers on 127.0.0.1 that answer exactly the bytes each test needs."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.projector.http1 import Answer, Http1Pool, HttpTransportError
from tls_authority import Authority

OK = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A TCP server whose connections run ``handler``; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request (head and a Content-Length body), or None at the client's close."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request


def answering(server_answer: Callable[[Server], bytes], *, close: bool = False) -> Handler:
    """A handler that answers every request with ``server_answer``; closes after the first
    answer when ``close``."""
    holder: dict[str, Server] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = holder["server"]
        while await server.read_request(reader) is not None:
            writer.write(server_answer(server))
            await writer.drain()
            if close:
                return

    handler.holder = holder  # type: ignore[attr-defined]
    return handler


def serve(handler: Handler) -> Server:
    server = Server(handler)
    holder = getattr(handler, "holder", None)
    if holder is not None:
        holder["server"] = server
    return server


def pool(url: str, **kwargs: Any) -> Http1Pool:
    kwargs.setdefault("max_connections", 4)
    kwargs.setdefault("timeout_s", 5.0)
    return Http1Pool(url, **kwargs)


def test_requests_reuse_one_keep_alive_connection_and_carry_head_and_body() -> None:
    async def run() -> tuple[Server, list[Answer], str]:
        async with serve(answering(lambda s: OK)) as server:
            port = server.url.rsplit(":", 1)[1]
            client = pool(server.url + "/studio-data/v1/")
            answers = [
                await client.request(
                    "PUT", f"/projection-batches/b{i}", {"X-Baml-Relation": "calls_v1"}, b"x" * i
                )
                for i in range(5)
            ]
            client.close()
            return server, answers, port

    server, answers, port = asyncio.run(run())
    assert server.connections == 1
    assert [a.status for a in answers] == [201] * 5
    assert answers[0].content == b"{}"
    assert ("content-type", "application/json") in answers[0].headers
    assert server.requests[3] == (
        b"PUT /studio-data/v1/projection-batches/b3 HTTP/1.1\r\n"
        + f"Host: 127.0.0.1:{port}\r\n".encode()
        + b"Content-Length: 3\r\nX-Baml-Relation: calls_v1\r\n\r\nxxx"
    )


def test_an_answer_that_closes_the_connection_is_not_reused() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na"

    async def run() -> Server:
        async with serve(answering(lambda s: closing, close=True)) as server:
            client = pool(server.url)
            for _ in range(3):
                assert (await client.request("PUT", "/p", {}, b"b")).content == b"a"
            client.close()
            return server

    assert asyncio.run(run()).connections == 3


def test_chunked_and_close_delimited_bodies_are_read_whole() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"
    )
    until_close = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\n\r\nbusy, later"

    async def run() -> tuple[Answer, Answer]:
        async with (
            serve(answering(lambda s: chunked)) as a,
            serve(answering(lambda s: until_close, close=True)) as b,
        ):
            first = await pool(a.url).request("PUT", "/p", {}, b"")
            second = await pool(b.url).request("PUT", "/p", {}, b"")
            return first, second

    first, second = asyncio.run(run())
    assert (first.status, first.content) == (200, b"abcdefg")
    assert (second.status, second.content) == (503, b"busy, later")
    assert ("retry-after", "2") in second.headers


def test_a_keep_alive_connection_the_server_dropped_is_replaced_without_an_error() -> None:
    """The server keeps-alive in words but closes after each answer (an idle timeout): the
    next request finds the connection closed before any byte and goes out on a new one."""

    async def run() -> Server:
        async with serve(answering(lambda s: OK, close=True)) as server:
            client = pool(server.url, max_connections=1)
            for _ in range(4):
                assert (await client.request("PUT", "/p", {}, b"b")).status == 201
                await asyncio.sleep(0.05)  # let the server's close reach the client first
            client.close()
            return server

    server = asyncio.run(run())
    assert server.connections == 4
    assert len(server.requests) == 4  # each request sent once: none lost, none doubled


def test_a_reused_connection_closed_before_its_answer_is_resent_on_a_new_one() -> None:
    """The race the idle timeout makes: the server closes a kept-alive connection just as a
    request goes out on it, with no byte of an answer; the request goes out again on a new
    connection (a fresh connection closing early would be an error: the test below)."""

    async def drops_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = server.connections == 1
        served = 0
        while await server.read_request(reader) is not None:
            if first and served == 1:
                return  # the second request on the first connection: close, no answer
            writer.write(OK)
            await writer.drain()
            served += 1

    server = serve(drops_second)

    async def run() -> list[int]:
        async with server:
            client = pool(server.url, max_connections=1)
            statuses = [(await client.request("PUT", f"/p{i}", {}, b"b")).status for i in range(3)]
            client.close()
            return statuses

    assert asyncio.run(run()) == [201, 201, 201]
    assert server.connections == 2
    assert [r.split(b" ")[1] for r in server.requests] == [b"/p0", b"/p1", b"/p1", b"/p2"]


def test_a_connection_closed_mid_answer_is_an_error_and_not_resent() -> None:
    async def run() -> tuple[Server, BaseException]:
        async with serve(
            answering(lambda s: b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\n{", close=True)
        ) as server:
            with pytest.raises(HttpTransportError) as caught:
                await pool(server.url).request("PUT", "/p", {}, b"b")
            return server, caught.value

    server, error = asyncio.run(run())
    assert "closed before a complete answer" in str(error)
    assert isinstance(error, OSError)
    assert len(server.requests) == 1


def test_bytes_that_are_not_http_are_an_error() -> None:
    async def run() -> None:
        async with serve(answering(lambda s: b"SSH-2.0-OpenSSH_9.2\r\n\r\n")) as server:
            with pytest.raises(HttpTransportError, match=r"not HTTP/1\.1"):
                await pool(server.url).request("PUT", "/p", {}, b"b")

    asyncio.run(run())


def test_a_silent_server_times_out_and_the_connection_is_closed() -> None:
    async def run() -> None:
        seen_close: list[bool] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await server.read_request(reader)
            seen_close.append(await reader.read() == b"")  # EOF once the client gives up

        server = serve(silent)
        async with server:
            with pytest.raises(TimeoutError):
                await pool(server.url, timeout_s=0.2).request("PUT", "/p", {}, b"b")
            for _ in range(100):
                if seen_close:
                    break
                await asyncio.sleep(0.02)
        assert seen_close == [True]

    asyncio.run(run())


def test_no_more_than_max_connections_are_open_at_once() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.read_request(reader) is not None:
            await asyncio.sleep(0.01)
            writer.write(OK)
            await writer.drain()

    server = serve(slow)

    async def run() -> list[Answer]:
        async with server:
            client = pool(server.url, max_connections=3)
            answers = await asyncio.gather(
                *(client.request("PUT", f"/p{i}", {}, b"b") for i in range(30))
            )
            client.close()
            return list(answers)

    answers = asyncio.run(run())
    assert [a.status for a in answers] == [201] * 30
    assert server.most_open == 3 and server.connections == 3
    assert len(server.requests) == 30


def test_an_unreachable_server_is_a_transport_error() -> None:
    async def run() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        with pytest.raises(HttpTransportError, match="cannot connect"):
            await pool(f"http://127.0.0.1:{port}").request("PUT", "/p", {}, b"")

    asyncio.run(run())


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nX-Injected: 1"},
        {"X-Evil": "a\nb"},
        {"Host": "elsewhere"},
        {"content-length": "5"},
        {"X-Name": "caf\u00e9\u2603"},
    ],
)
def test_headers_that_would_break_the_request_are_refused(headers: dict[str, str]) -> None:
    client = pool("http://127.0.0.1:9")
    with pytest.raises(ValueError):
        client.head("PUT", "/p", headers, 0)


def test_a_path_with_a_space_is_refused_and_bad_settings_too() -> None:
    with pytest.raises(ValueError):
        pool("http://127.0.0.1:9").head("PUT", "/p q", {}, 0)
    for url in ("ftp://host", "http://", "localhost:80"):
        with pytest.raises(ValueError):
            pool(url)
    with pytest.raises(ValueError):
        pool("http://127.0.0.1:9", max_connections=0)
    with pytest.raises(ValueError):
        pool("http://127.0.0.1:9", timeout_s=0)


def test_https_verifies_the_server_against_the_given_roots(tmp_path: Path) -> None:
    authority = Authority(tmp_path, "http1")
    issued = authority.issue("server", server=True)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(issued.cert, issued.key)
    trusting = ssl.create_default_context(cafile=str(authority.path))

    async def run() -> tuple[Answer, int]:
        handler = answering(lambda s: OK)
        server = serve(handler)
        listener = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_context)
        port = listener.sockets[0].getsockname()[1]
        try:
            client = pool(f"https://127.0.0.1:{port}", ssl_context=trusting)
            answer = await client.request("PUT", "/p", {}, b"secret")
            again = await client.request("PUT", "/p", {}, b"secret")
            assert again.status == 201
            client.close()
            with pytest.raises(HttpTransportError, match="cannot connect"):
                # the default roots do not know this server's certificate
                await pool(f"https://127.0.0.1:{port}").request("PUT", "/p", {}, b"secret")
            return answer, server.connections
        finally:
            listener.close()

    answer, connections = asyncio.run(run())
    assert answer.status == 201
    # both requests on one connection; the unverified one never got past the handshake
    assert connections == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=st.binary(max_size=200) | st.builds(lambda tail: OK[:40] + tail, st.binary()))
def test_fuzzed_answers_give_an_answer_or_a_transport_error(reply: bytes) -> None:
    async def run() -> None:
        async with serve(answering(lambda s: reply, close=True)) as server:
            try:
                answer = await pool(server.url, timeout_s=2.0).request("PUT", "/p", {}, b"b")
            except HttpTransportError:
                return
            assert 100 <= answer.status <= 999

    asyncio.run(run())
