"""Egress end to end, per backend, with real sandboxes: code reaches out only through the
guest's relay (127.0.0.1:3128, its HTTP(S)_PROXY) and the host's ``EgressProxy``, under its
run's ``sandbox.egress``. On microvm every sandbox here is a clone restored from the
template, so these also prove the relay's port works behind a clone's fresh host end.

The allowed path is tested the honest way (see ``tenantry.sandbox.egress.proxy``): the vetting is
never relaxed; the driver gets a proxy whose resolver answers a public address for the
allowed name, and whose connector records the vetted address it is handed and then opens
a server of this test instead."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tenantry.ids import RunId, TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.egress import EgressPolicy, EgressProxy
from tenantry.sandbox.egress.policy import IPAddress
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.sandbox import Sandbox
from tenantry.sandbox.types import Binding, SandboxRefused
from tests.support.sandbox import ASK_THROUGH_RELAY, TEST_LIMITS, host_address, sandbox_settings

pytestmark = pytest.mark.timeout(300)

ALLOWED = "allowed.example"
PUBLIC = ipaddress.ip_address("93.184.215.14")  # what the test's DNS says ALLOWED is
#: Allowed names whose answers point inside: the proxy must refuse every one.
INSIDE = {"loopback.example": "127.0.0.1", "metadata.example": "169.254.169.254",
          "private.example": "10.0.0.5"}
EMPTY = "this agent allows no network access (its sandbox.egress is empty)"



@dataclass
class Upstream:
    """The test's stand-in for the internet: what the proxy dialled (the vetted address),
    and the requests the origin saw. Port 80 goes to an HTTP origin, 443 to an echo."""

    http_port: int = 0
    echo_port: int = 0
    dialed: list[tuple[IPAddress, int]] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        answer = {ALLOWED: str(PUBLIC), **INSIDE}.get(host)
        if answer is None:
            raise OSError(f"no such host {host}")
        return [ipaddress.ip_address(answer)]

    async def connect(self, address: IPAddress, port: int
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.dialed.append((address, port))
        return await asyncio.open_connection(
            "127.0.0.1", self.http_port if port == 80 else self.echo_port)

    async def origin(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n"
                     b"Connection: close\r\n\r\nhello, origin")
        await _close(writer)

    async def echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()  # the code's half-close, answered with ours
        await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[Upstream]:
    world = Upstream()
    http = await asyncio.start_server(world.origin, "127.0.0.1", 0)
    echo = await asyncio.start_server(world.echo, "127.0.0.1", 0)
    world.http_port = http.sockets[0].getsockname()[1]
    world.echo_port = echo.sockets[0].getsockname()[1]
    try:
        yield world
    finally:
        for server in (http, echo):
            server.close()
            await server.wait_closed()


@pytest.fixture(scope="module")
async def egress_driver(driver: PooledDriver, upstream: Upstream,
                        tmp_path_factory: pytest.TempPathFactory
                        ) -> AsyncIterator[PooledDriver]:
    """A driver of the same backend as ``driver`` whose proxy has the test's resolver and
    connector: constructor arguments, as no configuration can reach them."""
    name = driver.backend
    settings = sandbox_settings(tmp_path_factory.mktemp(f"egress-{name}"), name)
    proxy = EgressProxy(resolver=upstream.resolve, connector=upstream.connect)
    test_driver = PooledDriver(sandbox_probe.build_backend(name, settings), pool_size=0,
                               limits=TEST_LIMITS[name], egress=proxy)
    try:
        yield test_driver
    finally:
        await test_driver.close()


@pytest.fixture
def egress_logs(caplog: pytest.LogCaptureFixture, upstream: Upstream
                ) -> pytest.LogCaptureFixture:
    upstream.dialed.clear()
    upstream.requests.clear()
    caplog.set_level(logging.INFO, logger="tenantry.sandbox.egress.proxy")
    return caplog


@contextlib.asynccontextmanager
async def sandbox(driver: PooledDriver, egress: tuple[str, ...]) -> AsyncIterator[Sandbox]:
    box = await driver.create(Binding(TenantId("tenant-e"), RunId.new(), egress),
                              TEST_LIMITS[driver.backend])
    try:
        yield box
    finally:
        await box.destroy()


async def _run(box: Sandbox, code: str) -> dict[str, object]:
    result = await box.run_python(code)
    assert result.exit_code == 0, result.stderr
    outcome: dict[str, object] = json.loads(result.stdout)
    return outcome


def _decisions(caplog: pytest.LogCaptureFixture, *names: str) -> list[tuple[Any, ...]]:
    """The named structured fields (``extra``) of every egress decision logged."""
    return [tuple(vars(r)[name] for name in names) for r in caplog.records
            if hasattr(r, "decision")]


async def test_with_no_hosts_allowed_code_is_told_so_and_nothing_leaves(
        driver: PooledDriver, egress_logs: pytest.LogCaptureFixture) -> None:
    """The platform's own driver (its default proxy): an agent that allows nothing gets no
    proxy settings, and code that finds the relay anyway gets a 403 naming the empty
    allow-list — for the host's own addresses too — and no connection reaches the host."""
    accepted: list[object] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(count, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    targets = [f"{host_address()}:{port}", f"127.0.0.1:{port}", "example.com:443"]
    code = ASK_THROUGH_RELAY + f"""
import urllib.error, urllib.request
out = {{"env": [k for k in os.environ if "proxy" in k.lower()]}}
for target in {targets!r}:
    out[target] = ask(target)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({{"http": "http://127.0.0.1:3128"}}))
try:
    opener.open("http://{host_address()}:{port}/", timeout=60)
    out["urllib"] = "fetched"
except urllib.error.HTTPError as e:
    out["urllib"] = [e.code, e.read().decode()]
print(json.dumps(out))
"""
    try:
        async with sandbox(driver, ()) as box:
            outcome = await _run(box, code)
            run = str(box.binding.run)
    finally:
        server.close()
        await server.wait_closed()
    assert outcome.pop("env") == []
    assert outcome.pop("urllib") == [403, f"tenantry egress: {EMPTY}\n"]
    for target in targets:
        assert outcome[target] == f"HTTP/1.1 403 Forbidden (tenantry egress: {EMPTY})", target
    assert accepted == []
    assert _decisions(egress_logs, "decision", "tenant_id", "run_id") == [
        ("refused", "tenant-e", run)] * (len(targets) + 1)


async def test_hosts_off_the_list_and_names_resolving_inside_are_refused(
        egress_driver: PooledDriver, upstream: Upstream,
        egress_logs: pytest.LogCaptureFixture) -> None:
    refused = {
        "evil.example:443": "evil.example:443 is not in this agent's sandbox.egress allow-list",
        f"{ALLOWED}:22": f"{ALLOWED}:22 is not in this agent's sandbox.egress allow-list",
        "169.254.169.254:80": "169.254.169.254:80 is not in this agent's sandbox.egress",
        **{f"{name}:443": f"{name} resolves to {address}, a"
           for name, address in INSIDE.items()},
    }
    code = ASK_THROUGH_RELAY + f"""
out = {{"proxy": os.environ.get("HTTPS_PROXY")}}
for target in {sorted(refused)!r}:
    out[target] = ask(target)
print(json.dumps(out))
"""
    async with sandbox(egress_driver, (ALLOWED, *INSIDE)) as box:
        outcome = await _run(box, code)
    assert outcome.pop("proxy") == "http://127.0.0.1:3128"
    for target, reason in refused.items():
        status = str(outcome[target])
        assert status.startswith(f"HTTP/1.1 403 Forbidden (tenantry egress: {reason}"), status
    assert upstream.dialed == []  # nothing left the host
    assert _decisions(egress_logs, "decision") == [("refused",)] * len(refused)


async def test_an_allowed_host_is_reached_at_the_address_the_proxy_vetted(
        egress_driver: PooledDriver, upstream: Upstream,
        egress_logs: pytest.LogCaptureFixture) -> None:
    """Plain HTTP through the proxy settings the run was given (urllib reads them), a
    CONNECT tunnel carrying more than a few flow-control windows each way, and the
    sandbox's own loopback left direct (NO_PROXY): a server the code starts stays local."""
    size = 300_000
    code = f"""
import http.client, http.server, json, socket, threading, urllib.request
out = {{}}
class Local(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"served in the sandbox")
    def log_message(self, *args):
        pass
local = http.server.HTTPServer(("127.0.0.1", 0), Local)
threading.Thread(target=local.serve_forever, daemon=True).start()
with urllib.request.urlopen(f"http://127.0.0.1:{{local.server_port}}/", timeout=60) as reply:
    out["local"] = reply.read().decode()
local.shutdown()
with urllib.request.urlopen("http://{ALLOWED}/v1/things?x=1", timeout=60) as reply:
    out["http"] = [reply.status, reply.read().decode()]
tunnel = http.client.HTTPConnection("127.0.0.1", 3128, timeout=60)
tunnel.set_tunnel("{ALLOWED}", 443)
tunnel.connect()
payload = bytes(range(256)) * ({size} // 256)
def send():
    tunnel.sock.sendall(payload)
    tunnel.sock.shutdown(socket.SHUT_WR)
sender = threading.Thread(target=send)
sender.start()
echoed = b""
while chunk := tunnel.sock.recv(65536):
    echoed += chunk
sender.join()
out["tunnel"] = [len(echoed), echoed == payload]
print(json.dumps(out))
"""
    async with sandbox(egress_driver, (ALLOWED,)) as box:
        outcome = await _run(box, code)
        run = str(box.binding.run)
    size -= size % 256
    assert outcome == {"local": "served in the sandbox", "http": [200, "hello, origin"],
                       "tunnel": [size, True]}
    # The proxy dialled exactly the address it vetted, never a fresh lookup.
    assert upstream.dialed == [(PUBLIC, 80), (PUBLIC, 443)]
    [request] = upstream.requests
    lines = request.split(b"\r\n")
    assert lines[0] == b"GET /v1/things?x=1 HTTP/1.1"
    assert f"Host: {ALLOWED}".encode() in lines
    assert _decisions(egress_logs, "decision", "egress_host", "tenant_id", "run_id") == [
        ("allowed", ALLOWED, "tenant-e", run)] * 2


async def test_a_sandbox_keeps_the_egress_policy_it_was_bound_with(
        egress_driver: PooledDriver) -> None:
    """A sandbox serves one run: its channel cannot be served again under another policy."""
    async with sandbox(egress_driver, ()) as box:
        with pytest.raises(SandboxRefused, match="already attached"):
            await box.instance.attach_egress(egress_driver.egress, EgressPolicy((ALLOWED,)),
                                             {"tenant": "tenant-e", "run": "other"})
