"""tenantry.http1, the outbound HTTP/1.1 client, against real sockets on loopback: a raw
asyncio server that answers what each test scripts (framings a framework would not send on
demand: chunked, until-close, lies about lengths)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tenantry import http1
from tests.support.waiting import until

Answer = Callable[[bytes], bytes | None]  # request head + body → raw response, None: hang


class RawServer:
    """Answers each request on a connection with ``answer(request)``; counts connections."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/path?q=1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._answer_all(reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _answer_all(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                response = self.answer(request)
                if response is None:
                    await asyncio.Event().wait()  # hang
                    return
                writer.write(response)
                await writer.drain()
                if b"connection: close" in response.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


def ok(body: bytes = b'{"ok":true}', *headers: str) -> Answer:
    extra = "".join(f"{h}\r\n" for h in headers)
    raw = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    return lambda _request: raw


@pytest.fixture
async def client() -> AsyncIterator[http1.HttpClient]:
    client = http1.HttpClient(headers={"Authorization": "Bearer t"})
    yield client
    await client.aclose()


async def test_a_request_and_its_answer(client: http1.HttpClient) -> None:
    async with RawServer(ok(b'{"n":1}', "X-Ratelimit-Remaining-Requests: 7")) as server:
        response = await client.request("POST", server.url, body=b'{"q":2}',
                                        headers={"Content-Type": "application/json"})
    assert (response.status, response.json()) == (200, {"n": 1})
    assert response.headers["x-ratelimit-remaining-requests"] == "7"  # names lower-cased
    request = server.requests[0]
    assert request.startswith(b"POST /path?q=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in request
    assert b"Authorization: Bearer t\r\n" in request
    assert b"Content-Length: 7\r\n" in request
    assert request.endswith(b'\r\n\r\n{"q":2}')


async def test_connections_are_kept_alive_and_reused(client: http1.HttpClient) -> None:
    async with RawServer(ok()) as server:
        first = await client.request("GET", server.url)
        second = await client.request("GET", server.url)
        assert first.connect_ms > 0 and second.connect_ms == 0.0  # the second was pooled
        await asyncio.gather(*(client.request("GET", server.url) for _ in range(5)))
        assert server.connections == 5  # one per request in flight, no more
        for _ in range(3):
            await client.request("GET", server.url)
        assert server.connections == 5
        assert client.open_connections == 5


async def test_connections_per_origin_are_bounded() -> None:
    client = http1.HttpClient(max_per_origin=2)
    try:
        async with RawServer(ok()) as server:
            answers = await asyncio.gather(*(client.request("GET", server.url)
                                             for _ in range(10)))
            assert [a.status for a in answers] == [200] * 10
            assert server.connections == 2
    finally:
        await client.aclose()


async def test_idle_connections_are_closed_after_the_idle_timeout() -> None:
    client = http1.HttpClient(idle_timeout=0.05)
    try:
        async with RawServer(ok()) as server:
            await client.request("GET", server.url)
            assert client.open_connections == 1

            async def swept() -> bool:
                return client.open_connections == 0

            await until(swept, "the idle connection closed", 5)
            await client.request("GET", server.url)
            assert server.connections == 2
    finally:
        await client.aclose()


async def test_a_connection_the_server_closed_is_not_reused(client: http1.HttpClient) -> None:
    async with RawServer(ok(b"{}", "Connection: close")) as server:
        await client.request("GET", server.url)
        await client.request("GET", server.url)
        assert server.connections == 2
        assert client.open_connections == 0


async def test_chunked_and_until_close_bodies(client: http1.HttpClient) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n")
    async with RawServer(lambda _r: chunked) as server:
        assert (await client.request("GET", server.url)).content == b"hello world"
        assert (await client.request("GET", server.url)).content == b"hello world"
        assert server.connections == 1  # the chunked body ended: the connection was reused
    until_close = b"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\neverything until the end"
    async with RawServer(lambda _r: until_close) as server:
        response = await client.request("GET", server.url)
        assert response.content == b"everything until the end"


async def test_an_event_stream_is_read_as_it_arrives(client: http1.HttpClient) -> None:
    release = asyncio.Event()

    class Streaming(RawServer):
        async def _answer_all(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            event = b": keep-alive\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await release.wait()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async with Streaming(ok()) as server, \
            client.stream("POST", server.url, body=b"{}") as response:
        assert response.content_type == "text/event-stream"
        parser = http1.SseParser()
        events: list[http1.SseEvent] = []
        async for chunk in response.chunks():
            events += parser.feed(chunk)
            if events:
                break  # the first event came before the stream ended
        assert events == [http1.SseEvent("message", '{"a":\n1}', "1", None)]
        release.set()


async def test_failures_are_typed() -> None:
    client = http1.HttpClient(connect_timeout=5, max_body=10)
    try:
        async with RawServer(ok()) as server:
            url = server.url
        with pytest.raises(http1.ConnectFailed) as refused:
            await client.request("GET", url)
        assert refused.value.reason == "connect"

        async with RawServer(lambda _r: None) as server:
            with pytest.raises(http1.RequestTimeout) as slow:
                await client.request("GET", server.url, timeout=0.1)
            assert slow.value.reason == "timeout"

        async with RawServer(ok(b"x" * 11)) as server:
            with pytest.raises(http1.ResponseTooLarge):
                await client.request("GET", server.url)

        short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc"
        async with RawServer(lambda _r: short) as server:
            with pytest.raises(http1.ConnectionLost):
                await client.request("GET", server.url)

        async with RawServer(lambda _r: b"SMTP ready\r\n\r\n") as server:
            with pytest.raises(http1.ProtocolError):
                await client.request("GET", server.url)
    finally:
        await client.aclose()


async def test_redirects_are_answers_not_followed(client: http1.HttpClient) -> None:
    moved = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere/\r\n" \
            b"Content-Length: 0\r\n\r\n"
    async with RawServer(lambda _r: moved) as server:
        response = await client.request("POST", server.url, body=b"{}")
        assert (response.status, response.headers["location"]) == (307, "http://elsewhere/")
        assert len(server.requests) == 1


@pytest.mark.parametrize("headers", [{"X-Evil": "a\r\nInjected: 1"}, {"Bad Name": "v"}])
async def test_header_injection_is_refused(client: http1.HttpClient,
                                           headers: dict[str, Any]) -> None:
    async with RawServer(ok()) as server:
        with pytest.raises(ValueError, match="header"):
            await client.request("GET", server.url, headers=headers)
        assert server.requests == []


def test_urls_with_credentials_or_other_schemes_are_refused() -> None:
    for url in ("ftp://example.test/", "http://user:pw@example.test/", "http:///nohost"):
        with pytest.raises(ValueError, match="URL"):
            http1.target(url)
    where = http1.target("https://example.test/v1/x?y=1")
    assert (where.origin, where.port, where.host_header, where.path) == (
        "https://example.test", 443, "example.test", "/v1/x?y=1")


# -- framing read strictly (RFC 9112): what a tenant's server could use to desync a pooled
# connection is refused as a ProtocolError, and that connection is never reused -----------

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\nhello"

REFUSED: list[tuple[str, bytes]] = [
    ("chunk size with 0x", CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n"),
    ("chunk size with _", CHUNKED + b"0_5\r\nhello\r\n0\r\n\r\n"),
    ("chunk size with +", CHUNKED + b"+5\r\nhello\r\n0\r\n\r\n"),
    ("last chunk -0", CHUNKED + b"5\r\nhello\r\n-0\r\n\r\n"),
    ("space before a chunk size", CHUNKED + b" 5\r\nhello\r\n0\r\n\r\n"),
    ("space after a chunk size", CHUNKED + b"5 \r\nhello\r\n0\r\n\r\n"),
    ("empty chunk size", CHUNKED + b"\r\nhello\r\n0\r\n\r\n"),
    ("17 hex digits", CHUNKED + b"00000000000000005\r\nhello\r\n0\r\n\r\n"),
    ("bare LF in a chunk extension", CHUNKED + b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
    ("chunk extension without a name", CHUNKED + b"5;\r\nhello\r\n0\r\n\r\n"),
    ("chunk extension with an open quote", CHUNKED + b'5;a="b\r\nhello\r\n0\r\n\r\n'),
    ("whitespace in a chunk extension", CHUNKED + b"5 ;a\r\nhello\r\n0\r\n\r\n"),
    ("chunk data not ended by CRLF", CHUNKED + b"5\r\nhello\n0\r\n\r\n"),
    ("trailer that is not a field", CHUNKED + b"5\r\nhello\r\n0\r\nnot a field\r\n\r\n"),
    ("folded trailer", CHUNKED + b"5\r\nhello\r\n0\r\nX-A: b\r\n c\r\n\r\n"),
    ("Content-Length: 5, 7", LENGTH % b"5, 7"),
    ("two Content-Lengths that differ",
     b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello"),
    ("Content-Length: +5", LENGTH % b"+5"),
    ("Content-Length: 0_5", LENGTH % b"0_5"),
    ("Content-Length: 0x5", LENGTH % b"0x5"),
    ("Content-Length: 5 5", LENGTH % b"5 5"),
    ("Content-Length: -5", LENGTH % b"-5"),
    ("empty Content-Length", LENGTH % b""),
    ("Content-Length: 5,", LENGTH % b"5,"),
    ("Transfer-Encoding and Content-Length",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n"),
    ("Transfer-Encoding: gzip, chunked",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("Transfer-Encoding: chunked, chunked",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("Transfer-Encoding: gzip",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nhello"),
    ("Transfer-Encoding in HTTP/1.0",
     b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("status 2_00", b"HTTP/1.1 2_00 OK\r\nContent-Length: 0\r\n\r\n"),
    ("status +200", b"HTTP/1.1 +200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("status 0200", b"HTTP/1.1 0200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("status 600", b"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n"),
    ("HTTP/1.10", b"HTTP/1.10 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("HTTP/2.0", b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("obs-fold", b"HTTP/1.1 200 OK\r\nX-A: b\r\n\tX-B: c\r\nContent-Length: 5\r\n\r\nhello"),
    ("space before the colon", b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello"),
    ("header name not a token", b"HTTP/1.1 200 OK\r\nX(A): b\r\nContent-Length: 5\r\n\r\nhello"),
    ("NUL in a header value", b"HTTP/1.1 200 OK\r\nX-A: b\0c\r\nContent-Length: 5\r\n\r\nhello"),
    ("bare CR in a header value",
     b"HTTP/1.1 200 OK\r\nX-A: b\rc\r\nContent-Length: 5\r\n\r\nhello"),
    ("bare LF in the head",
     b"HTTP/1.1 200 OK\r\nX-A: b\nContent-Length: 7\r\nContent-Length: 5\r\n\r\nhello"),
    ("101 Switching Protocols to a request that asked for no upgrade",
     b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
]


@pytest.mark.parametrize(("why", "raw"), REFUSED, ids=[why for why, _ in REFUSED])
async def test_ambiguous_framing_is_refused_and_the_connection_dropped(
        client: http1.HttpClient, why: str, raw: bytes) -> None:
    async with RawServer(lambda _r: raw) as server:
        with pytest.raises(http1.ProtocolError):
            await client.request("GET", server.url, timeout=5)
        assert client.open_connections == 0  # never back in the pool


@pytest.mark.parametrize(("why", "raw"), [
    ("a chunk size past the body cap", CHUNKED + b"ffffffffffffffff\r\nabc"),
    ("a Content-Length past the body cap", LENGTH % b"1073741824"),
    ("a Content-Length of 20 digits", LENGTH % b"99999999999999999999"),
])
async def test_absurd_lengths_are_refused_before_their_bytes(
        client: http1.HttpClient, why: str, raw: bytes) -> None:
    # The server sends the head and a few bytes, then waits: the length alone is refused.
    async with RawServer(lambda _r: raw) as server:
        with pytest.raises((http1.ResponseTooLarge, http1.ProtocolError)):
            await client.request("GET", server.url, timeout=5)
        assert client.open_connections == 0


@pytest.mark.parametrize(("why", "raw", "body"), [
    ("Content-Length: 5, 5 (a repeated value, RFC 9110 §8.6)", LENGTH % b"5, 5", b"hello"),
    ("two equal Content-Lengths",
     b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello", b"hello"),
    ("chunk extensions, upper-case hex, leading zeros, trailers",
     CHUNKED + b'0005;a=b;c="d;\\"e"\r\nhello\r\nA;x\r\n0123456789\r\n'
     b"000\r\nTrailer-A: 1\r\nTrailer-B:\r\n\r\n", b"hello0123456789"),
    ("Transfer-Encoding in any case", CHUNKED.replace(b"chunked", b"Chunked")
     + b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    ("no reason phrase", b"HTTP/1.1 200 \r\nContent-Length: 5\r\n\r\nhello", b"hello"),
    ("no space nor reason", b"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello", b"hello"),
    ("interim answers first", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
     b"Link: </a>\r\n\r\n" + LENGTH % b"5", b"hello"),
])
async def test_strict_framing_still_reads_what_the_rfc_allows(
        client: http1.HttpClient, why: str, raw: bytes, body: bytes) -> None:
    async with RawServer(lambda _r: raw) as server:
        for _ in range(2):
            assert (await client.request("GET", server.url, timeout=5)).content == body
        assert server.connections == 1  # each answer ended where it said: reused


async def test_endless_interim_answers_are_refused(client: http1.HttpClient) -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" * 100 + LENGTH % b"5"
    async with RawServer(lambda _r: raw) as server:
        with pytest.raises(http1.ProtocolError, match="interim"):
            await client.request("GET", server.url, timeout=5)


async def test_endless_trailers_are_refused(client: http1.HttpClient) -> None:
    raw = CHUNKED + b"5\r\nhello\r\n0\r\n" + b"X-Trailer: " + b"t" * 100 + b"\r\n" * 1 \
        + b"X-T: t\r\n" * 20_000 + b"\r\n"
    async with RawServer(lambda _r: raw) as server:
        with pytest.raises(http1.ProtocolError, match="trailer"):
            await client.request("GET", server.url, timeout=5)


async def test_a_no_content_answer_announcing_a_body_does_not_keep_its_connection(
        client: http1.HttpClient) -> None:
    """A 204 has no body whatever its head says (RFC 9112 §6.3); one that announces five
    bytes may send them late, where the next request on that connection would read them
    as the start of its answer. Such a connection is closed, not pooled."""
    served: list[int] = []

    class LateBody(RawServer):
        async def _answer_all(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            requests_here = 0
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    requests_here += 1
                    served.append(requests_here)
                    if len(served) == 1:
                        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
                    else:  # the late body, then the real answer
                        late = b"hello" if requests_here > 1 else b""
                        writer.write(late + LENGTH % b"5")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass

    async with LateBody(ok()) as server:
        first = await client.request("DELETE", server.url, timeout=5)
        assert (first.status, first.content) == (204, b"")
        second = await client.request("GET", server.url, timeout=5)
        assert (second.status, second.content) == (200, b"hello")
        assert server.connections == 2 and served == [1, 1]


async def test_a_body_refused_while_draining_does_not_go_back_to_the_pool(
        client: http1.HttpClient) -> None:
    """The data of a chunk not followed by CRLF: the framing is broken, and whatever
    follows must not be read as more chunks (here a well-formed end that would make the
    connection look reusable)."""
    raw = CHUNKED + b"5\r\nhello1\r\nZ\r\n0\r\n\r\n"
    async with RawServer(lambda _r: raw) as server:
        async with client.stream("GET", server.url, drain=5) as response:
            assert response.status == 200
        assert client.open_connections == 0
        with pytest.raises(http1.ProtocolError):
            await client.request("GET", server.url, timeout=5)
