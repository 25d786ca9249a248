"""Sandbox egress end to end on one host: the real guest relay (``guest/relay.py``) runs as a
subprocess joined to ``EgressProxy`` by a socketpair — the byte stream a virtio-serial port
or an inherited socket is in a real sandbox — and the test plays the sandbox's code,
connecting to the relay's listening port as its HTTP proxy.

The allowed path: every address a test server can listen on here is one the proxy must
refuse, and the vetting is never relaxed for tests. So the test's resolver answers a public
address for the allowed name, and the test's connector — handed the vetted address —
records it and opens the local server instead (see ``tenantry.sandbox.egress.proxy``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tenantry.sandbox.guest
from tenantry.sandbox.egress import EgressLimits, EgressPolicy, EgressProxy
from tenantry.sandbox.egress.frames import (
    DATA,
    INITIAL_WINDOW,
    MAX_PAYLOAD,
    OPEN,
    encode_frame,
    read_frame,
)
from tenantry.sandbox.egress.policy import IPAddress

RELAY = Path(tenantry.sandbox.guest.__file__).parent / "relay.py"
ALLOWED = "api.allowed.test"
PUBLIC = ipaddress.ip_address("93.184.215.14")  # what the test's DNS says ALLOWED is
TENANT, RUN = "ten_test", "run_test"


class Resolver:
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return [ipaddress.ip_address(a) for a in self.table[host]]


@dataclass
class DialLocal:
    """Connects whatever vetted address it is given to the local server, and remembers
    what it was given."""

    port: int
    dialed: list[tuple[IPAddress, int]] = field(default_factory=list)

    async def __call__(self, address: IPAddress, port: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.dialed.append((address, port))
        return await asyncio.open_connection("127.0.0.1", self.port)


@dataclass
class Sandbox:
    port: int  # the relay's listening port: the code's HTTP_PROXY
    dial: DialLocal

    async def request(self, head: bytes
                      ) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
        """Open a connection to the proxy, send ``head``, return the response head."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(head)
        await writer.drain()
        return await reader.readuntil(b"\r\n\r\n"), reader, writer


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):  # the other side may have reset it first
        await writer.wait_closed()


@asynccontextmanager
async def sandbox(upstream_port: int, *, answers: dict[str, list[str]] | None = None,
                  hosts: tuple[str, ...] = (ALLOWED,), limits: EgressLimits | None = None
                  ) -> AsyncIterator[Sandbox]:
    host_end, guest_end = socket.socketpair()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", str(RELAY), "--fd", str(guest_end.fileno()),
        "--listen", "127.0.0.1:0", pass_fds=(guest_end.fileno(),),
        stdout=asyncio.subprocess.PIPE)
    guest_end.close()
    assert process.stdout is not None
    ready = await process.stdout.readline()  # "relay listening on 127.0.0.1:PORT"
    port = int(ready.decode().rsplit(":", 1)[1])
    dial = DialLocal(upstream_port)
    proxy = EgressProxy(limits=limits, connector=dial,
                        resolver=Resolver(answers if answers is not None
                                          else {ALLOWED: [str(PUBLIC)]}))
    reader, writer = await asyncio.open_connection(sock=host_end)
    served = asyncio.create_task(proxy.serve(reader, writer, EgressPolicy(hosts),
                                             labels={"tenant": TENANT, "run": RUN}))
    try:
        yield Sandbox(port, dial)
    finally:
        served.cancel()
        await asyncio.gather(served, return_exceptions=True)
        # The host's end closed: the relay (an inherited descriptor) ends on its own.
        assert await process.wait() == 0


@asynccontextmanager
async def server(handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                  Awaitable[None]]) -> AsyncIterator[int]:
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        await srv.wait_closed()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echo until the client's EOF, then end ours (a half-close travels both ways)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
    except OSError:
        pass
    finally:
        await _close(writer)


@pytest.fixture
def egress_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="tenantry.sandbox.egress.proxy")
    return caplog


def _fields(record: logging.LogRecord, *names: str) -> tuple[Any, ...]:
    """Structured fields of a log record (they arrive as ``extra``)."""
    return tuple(vars(record)[name] for name in names)


def _decisions(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if hasattr(r, "decision")]


# -- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(("head", "host"), [
    (b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", "evil.example"),
    (b"CONNECT api.allowed.test:22 HTTP/1.1\r\n\r\n", ALLOWED),  # a port not allowed
    (b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n", "169.254.169.254"),
    (b"GET http://2130706433/ HTTP/1.1\r\nHost: 2130706433\r\n\r\n", "2130706433"),
    (b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", "::1"),
])
async def test_a_host_off_the_allow_list_is_refused_403(
        egress_logs: pytest.LogCaptureFixture, head: bytes, host: str) -> None:
    async with server(echo) as upstream, sandbox(upstream) as box:
        response, reader, writer = await box.request(head)
        status = response.split(b"\r\n")[0].decode()
        assert status.startswith("HTTP/1.1 403 Forbidden (tenantry egress: ")
        assert "allow-list" in status
        body = await reader.read()  # then a clean end, not a reset: the code can print it
        assert body.startswith(b"tenantry egress: ") and body.endswith(b"\n")
        await _close(writer)
        assert box.dial.dialed == []  # nothing left the host
    [record] = _decisions(egress_logs)
    assert _fields(record, "decision", "egress_host", "tenant_id", "run_id") == (
        "refused", host, TENANT, RUN)
    assert "allow-list" in _fields(record, "reason")[0]


@pytest.mark.parametrize("answer", ["127.0.0.1", "169.254.169.254", "10.0.0.5",
                                    "::ffff:127.0.0.1", "fd00::2"])
async def test_an_allowed_name_resolving_inside_is_refused_403(
        egress_logs: pytest.LogCaptureFixture, answer: str) -> None:
    async with server(echo) as upstream, \
            sandbox(upstream, answers={ALLOWED: [str(PUBLIC), answer]}) as box:
        response, reader, writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        status = response.split(b"\r\n")[0].decode()
        assert status.startswith("HTTP/1.1 403")
        assert f"{ALLOWED} resolves to {ipaddress.ip_address(answer)}" in status
        await reader.read()
        await _close(writer)
        assert box.dial.dialed == []
    [record] = _decisions(egress_logs)
    decision, reason = _fields(record, "decision", "reason")
    assert decision == "refused" and "resolves to" in reason


async def test_python_code_sees_the_reason_in_its_exception() -> None:
    """What model-written code prints when it reaches for a host it may not."""
    async with server(echo) as upstream, sandbox(upstream) as box:
        def fetch() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", box.port, timeout=60)
            connection.set_tunnel("metadata.google.internal", 443)
            try:
                connection.connect()
            finally:
                connection.close()

        with pytest.raises(OSError, match=r"Tunnel connection failed: 403 Forbidden "
                                          r"\(tenantry egress: metadata\.google\.internal:443 "
                                          r"is not in this agent's sandbox\.egress"):
            await asyncio.to_thread(fetch)


async def test_a_request_that_is_not_for_a_proxy_is_a_bad_request() -> None:
    async with server(echo) as upstream, sandbox(upstream) as box:
        response, reader, writer = await box.request(
            b"GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 400 Bad Request")
        assert b"HTTP_PROXY" in await reader.read()
        await _close(writer)


# -- the allowed path ---------------------------------------------------------------------


async def test_connect_to_an_allowed_host_carries_bytes_both_ways(
        egress_logs: pytest.LogCaptureFixture) -> None:
    async with server(echo) as upstream, sandbox(upstream) as box:
        response, reader, writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\nHost: {ALLOWED}:443\r\n\r\n".encode())
        assert response == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"hello through the tunnel")
        await writer.drain()
        assert await reader.readexactly(24) == b"hello through the tunnel"
        writer.write_eof()  # our half-close reaches the server, and its own comes back
        assert await reader.read() == b""
        await _close(writer)
        # The proxy dialled exactly the address it vetted, not a fresh lookup.
        assert box.dial.dialed == [(PUBLIC, 443)]
    [record] = _decisions(egress_logs)
    assert _fields(record, "decision", "egress_host", "egress_port") == (
        "allowed", ALLOWED, "443")
    [ended] = [r for r in egress_logs.records if r.getMessage() == "egress connection ended"]
    assert _fields(ended, "outcome", "bytes_up", "bytes_down") == ("closed", 24, 24)


async def test_plain_http_is_forwarded_with_the_checked_host() -> None:
    seen: list[bytes] = []

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head + await reader.readexactly(5))
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n"
                     b"\r\nok")
        await _close(writer)

    async with server(origin) as upstream, sandbox(upstream) as box:
        response, reader, writer = await box.request(
            f"POST http://{ALLOWED}/v1/things?x=1 HTTP/1.1\r\nHost: other.example\r\n"
            "Proxy-Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello".encode())
        assert response.startswith(b"HTTP/1.1 201 Created")
        assert await reader.read() == b"ok"
        await _close(writer)
        assert box.dial.dialed == [(PUBLIC, 80)]
    [request] = seen
    lines = request.split(b"\r\n")
    assert lines[0] == b"POST /v1/things?x=1 HTTP/1.1"
    assert f"Host: {ALLOWED}".encode() in lines and b"Connection: close" in lines
    assert not [line for line in lines if line.lower().startswith((b"proxy-", b"host: other"))]
    assert request.endswith(b"\r\n\r\nhello")


async def test_megabytes_flow_both_ways_under_the_windows() -> None:
    """Far more than one window each way, written while reading: credit has to come back
    for the transfer to finish at all, and every byte arrives in order."""
    payload = os.urandom(3 * 1024 * 1024 + 17)
    async with server(echo) as upstream, sandbox(upstream) as box:
        response, reader, writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        assert response.startswith(b"HTTP/1.1 200")

        async def send() -> None:
            for i in range(0, len(payload), 100_000):
                writer.write(payload[i:i + 100_000])
                await writer.drain()
            writer.write_eof()

        sender = asyncio.create_task(send())
        echoed = await reader.read(-1)
        await sender
        await _close(writer)
    assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()


async def test_connections_share_the_channel_without_waiting_on_each_other() -> None:
    """A tunnel whose code does not read (its window full) does not stall another."""
    async with server(echo) as upstream, sandbox(upstream) as box:
        _, _, stuck_writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        # Echoed back and never read: enough to fill every buffer on the way, so this
        # stream ends up waiting for credit that its code will never return.
        stuck_writer.write(bytes(16 * 1024 * 1024))
        _, reader, writer = await box.request(f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        for _ in range(20):
            writer.write(b"x" * MAX_PAYLOAD)
            assert await reader.readexactly(MAX_PAYLOAD) == b"x" * MAX_PAYLOAD
        await _close(writer)
        stuck_writer.transport.abort()  # its unsent megabytes would never flush


# -- limits -----------------------------------------------------------------------------


async def test_connections_past_the_limit_are_answered_503() -> None:
    async with server(echo) as upstream, \
            sandbox(upstream, limits=EgressLimits(max_streams=2)) as box:
        open_ = [await box.request(f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
                 for _ in range(2)]
        assert all(r.startswith(b"HTTP/1.1 200") for r, _, _ in open_)
        response, reader, writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        assert response.startswith(b"HTTP/1.1 503")
        assert b"more than 2 connections" in await reader.read()
        for w in [writer, *(w for _, _, w in open_)]:
            await _close(w)


async def test_a_connection_past_its_byte_cap_is_cut(
        egress_logs: pytest.LogCaptureFixture) -> None:
    cap = 256 * 1024
    async with server(echo) as upstream, \
            sandbox(upstream, limits=EgressLimits(max_stream_bytes=cap)) as box:
        _, reader, writer = await box.request(f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())

        async def send() -> None:
            try:
                for _ in range(64):
                    writer.write(b"y" * 65536)
                    await writer.drain()
            except OSError:
                pass  # cut while writing: that is the point

        sender = asyncio.create_task(send())
        received = 0
        try:
            while data := await reader.read(65536):
                received += len(data)
        except ConnectionResetError:
            pass  # the relay resets the code's connection: the bytes stop short
        await sender
        await _close(writer)
    assert received <= cap
    [ended] = [r for r in egress_logs.records if r.getMessage() == "egress connection ended"]
    outcome, up, down = _fields(ended, "outcome", "bytes_up", "bytes_down")
    assert outcome == f"byte cap of {cap} reached" and up + down <= cap


async def test_an_idle_connection_is_closed(egress_logs: pytest.LogCaptureFixture) -> None:
    async with server(echo) as upstream, \
            sandbox(upstream, limits=EgressLimits(idle_timeout_s=0.2)) as box:
        response, reader, writer = await box.request(
            f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode())
        assert response.startswith(b"HTTP/1.1 200")
        with pytest.raises(ConnectionResetError):
            await reader.read()  # nothing sent either way: the proxy ends it
        await _close(writer)
    [ended] = [r for r in egress_logs.records if r.getMessage() == "egress connection ended"]
    assert _fields(ended, "outcome")[0].startswith("idle")


# -- a hostile guest --------------------------------------------------------------------


async def never_answers(host: str, port: int) -> list[IPAddress]:
    await asyncio.Event().wait()  # the stream stays parked in name resolution
    raise AssertionError("unreachable")


HEAD = f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n".encode()


@pytest.mark.parametrize("frames", [
    # Past the window: a request, then more than a window of bytes nobody has credited.
    [encode_frame(OPEN, 1), encode_frame(DATA, 1, HEAD)]
    + [encode_frame(DATA, 1, b"z" * MAX_PAYLOAD)] * (INITIAL_WINDOW // MAX_PAYLOAD + 1),
    [encode_frame(OPEN, 5), encode_frame(OPEN, 3)],  # ids must increase
    [encode_frame(DATA, 7, b"x")],  # a stream never opened
    [b"\x09" + bytes(8)],  # not a frame at all
])
async def test_a_guest_that_breaks_the_protocol_loses_its_channel(
        egress_logs: pytest.LogCaptureFixture, frames: list[bytes]) -> None:
    host_end, guest_end = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=host_end)
    guest_reader, guest_writer = await asyncio.open_connection(sock=guest_end)
    served = asyncio.create_task(EgressProxy(resolver=never_answers).serve(
        reader, writer, EgressPolicy((ALLOWED,)), labels={"tenant": TENANT, "run": RUN}))
    guest_writer.write(b"".join(frames))
    await guest_writer.drain()
    await served  # returns: the host stops serving this channel
    while await read_frame(guest_reader) is not None:
        pass  # whatever the host sent before it hung up; then EOF
    await _close(guest_writer)
    [warning] = [r for r in egress_logs.records if r.levelno == logging.WARNING]
    assert _fields(warning, "tenant_id")[0] == TENANT and "protocol" in warning.getMessage()
