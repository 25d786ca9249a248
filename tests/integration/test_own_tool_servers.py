"""Tenants own their tool servers and secrets (``/v1``, with their own key), and the
operator decides where such a server may be (tools/destinations.py).

With the tests' rules (private addresses allowed: the servers are on this machine) a tenant
stores a secret, registers a server that sends it, lists, reads, re-pins it, an agent's run
calls its tool through the guarded connection, and the secret cannot be removed while the
server sends it; removing the server, then the secret, works. With the default rules, a URL
at loopback or the metadata address, plain http, or a host the operator did not allow is a
422 ``tool_server_url_refused`` with nothing stored and nothing sent; and a name that
resolved to a public address when registered but rebinds to loopback later reaches nothing
(every connection goes to an address vetted then)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId
from tenantry.models.loopback import LoopbackServer
from tenantry.sandbox.egress.policy import IPAddress, literal_address
from tenantry.tools.destinations import Destinations, UrlRefused
from tenantry.tools.mcp_client import McpToolClient
from tests.support.api import Api, serving_api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes

REFUSED = "tool_server_url_refused"


class Counting:
    """A server on this machine that counts every request it gets (on any path), for the
    refusals: nothing may reach it."""

    def __init__(self) -> None:
        self.hits = 0
        self.hosts: list[str] = []

        async def count(request: Request) -> Response:
            self.hits += 1
            self.hosts.append(request.headers.get("host", ""))
            return Response(b"{}", 200, media_type="application/json")

        self._http = LoopbackServer(Starlette(routes=[
            Route("/{path:path}", count, methods=["GET", "POST", "DELETE"])]))

    @property
    def port(self) -> int:
        return self._http.port


@pytest.fixture
async def counting() -> AsyncIterator[Counting]:
    server = Counting()
    await server._http.start()
    try:
        yield server
    finally:
        await server._http.stop()


async def test_a_tenant_registers_uses_and_removes_its_own_server_and_secret(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    r = await api.client.put("/v1/secrets/effects-key", headers=h, json={"value": "s3cret"})
    assert r.status_code == 201, r.text
    assert "s3cret" not in r.text
    r = await api.client.put("/v1/secrets/effects-key", headers=h, json={"value": "rotated"})
    assert r.status_code == 200, r.text  # stored again: rotated
    r = await api.client.post("/v1/tool-servers", headers=h, json={
        "name": "effects", "url": fakes.mcp.url, "honours_idempotency_keys": True,
        "secret": "effects-key", "call_timeout_seconds": 45})
    assert r.status_code == 201, r.text
    server = r.json()
    assert server["registered_by"] == "tenant" and server["secret"] == "effects-key"
    assert server["call_timeout_seconds"] == 45 and "echo" in server["tools"]

    listed = (await api.client.get("/v1/tool-servers", headers=h)).json()
    assert [s["name"] for s in listed["data"]] == ["effects"]
    assert (await api.client.get("/v1/tool-servers/effects", headers=h)).json() == server
    r = await api.client.post("/v1/tool-servers/effects/pin", headers=h)
    assert r.status_code == 200 and r.json()["tools_sha256"] == server["tools_sha256"], r.text
    # The operator sees it as the tenant's.
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/tool-servers/effects",
                             headers=api.operator)
    assert r.json()["registered_by"] == "tenant", r.text
    # Another tenant sees none of it.
    _, other = await api.tenant("Other")
    assert (await api.client.get("/v1/tool-servers/effects", headers=other)).status_code == 404
    assert (await api.client.get("/v1/secrets/effects-key", headers=other)).status_code == 404

    agent = await api.agent(h, tools=["echo"])
    run_id = await api.start(h, agent, scripted(call("echo", text="hello"),
                                                answer("said {last_tool_result}")))
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFinished", events[-1]
    assert (await api.run(h, run_id))["answer"] == "said hello"
    assert fakes.mcp.authorizations[-1] == "Bearer rotated"

    r = await api.client.delete("/v1/secrets/effects-key", headers=h)
    assert r.status_code == 409 and r.json()["tool_servers"] == ["effects"], r.text
    assert (await api.client.delete("/v1/tool-servers/effects", headers=h)).status_code == 204
    assert (await api.client.get("/v1/tool-servers/effects", headers=h)).status_code == 404
    assert (await api.client.delete("/v1/tool-servers/effects", headers=h)).status_code == 404
    assert (await api.client.delete("/v1/secrets/effects-key", headers=h)).status_code == 204
    assert (await api.client.get("/v1/secrets", headers=h)).json()["data"] == []
    # A NUL or a name no secret can have is a 404, not a 500.
    assert (await api.client.delete("/v1/secrets/a%00b", headers=h)).status_code == 404


@pytest.mark.parametrize(("url", "said"), [
    ("https://127.0.0.1:{port}/mcp", "loopback"),
    ("https://localhost:{port}/mcp", "loopback"),
    ("https://169.254.169.254/mcp", "169.254.169.254"),
    ("https://[::ffff:127.0.0.1]:{port}/mcp", "loopback"),
    ("https://10.1.2.3/mcp", "private"),
    ("http://mcp.example.com/mcp", "https"),
])
async def test_the_default_rules_refuse_a_tenants_server_off_the_public_internet(
    database_dsn: str, counting: Counting, url: str, said: str,
) -> None:
    async with serving_api(database_dsn, tenant_tool_servers_allow_private=False) as api:
        _, h = await api.tenant()
        r = await api.client.post("/v1/tool-servers", headers=h, json={
            "name": "inside", "url": url.format(port=counting.port),
            "honours_idempotency_keys": True})
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == REFUSED and said in r.json()["detail"], r.text
        assert (await api.client.get("/v1/tool-servers", headers=h)).json()["data"] == []
    assert counting.hits == 0  # nothing was sent to it


async def test_the_operator_allows_only_its_hosts_and_still_registers_its_own(
    database_dsn: str, fakes: Fakes,
) -> None:
    async with serving_api(database_dsn, tenant_tool_servers_allow_private=False,
                           tenant_tool_server_hosts=("mcp.example.com",)) as api:
        tenant, h = await api.tenant()
        r = await api.client.post("/v1/tool-servers", headers=h, json={
            "name": "elsewhere", "url": "https://tools.example.org/mcp",
            "honours_idempotency_keys": True})
        assert r.status_code == 422 and r.json()["type"] == REFUSED, r.text
        assert "not among the hosts the operator allows" in r.json()["detail"]
        # The operator's own registration is the operator's decision: not held to them.
        server = await api.tool_server(tenant, fakes.mcp.url)
        assert server["registered_by"] == "operator"


class Rebinding:
    """A resolver whose answers change: what an attacker's DNS does between a check and a
    connect. Every name it is asked about answers the next address of ``answers``."""

    def __init__(self, *answers: str) -> None:
        self.answers = [literal_address(a) for a in answers]
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.asked.append(host)
        address = self.answers[min(len(self.asked), len(self.answers)) - 1]
        assert address is not None
        return [address]


async def test_a_name_that_rebinds_to_loopback_after_the_check_reaches_nothing(
    counting: Counting,
) -> None:
    """Registration's check sees a public address; the connection's own vetting (the only
    resolution it uses) sees loopback and refuses: the server on this machine is never
    reached under that name."""
    rebinding = Rebinding("93.184.216.34", "127.0.0.1")
    rules = Destinations(allow_private=False, resolver=rebinding)
    url = f"https://rebind.example.com:{counting.port}/mcp"
    await rules.vet_url(url)  # passes: a public address, then
    async with McpToolClient(destinations=rules) as mcp:
        with pytest.raises(ToolUnavailable) as refused:
            await mcp.list_tools(url, tenant=TenantId("t_rebind"), timeout=5, guarded=True)
    assert "loopback" in str(refused.value.detail), refused.value.detail
    assert rebinding.asked == ["rebind.example.com", "rebind.example.com"]
    assert counting.hits == 0
    with pytest.raises(UrlRefused):
        await rules.vet_url(url)  # and the check itself, asked again, says so


async def test_a_guarded_connection_goes_to_the_vetted_address_only(
    counting: Counting,
) -> None:
    """The name is resolved once, by the vetting: ``mcp.internal.test`` means nothing to
    the system's resolver, yet the request reaches the server at the address the vetting
    gave, carrying the name in its Host header (the HTTP client never resolved it)."""
    rules = Destinations(allow_private=True, resolver=Rebinding("127.0.0.1"))
    url = f"http://mcp.internal.test:{counting.port}/mcp"
    async with McpToolClient(destinations=rules) as mcp:
        with pytest.raises(ToolUnavailable):  # it answers no MCP: reached is what counts
            await mcp.list_tools(url, tenant=TenantId("t_vetted"), timeout=5, guarded=True)
    assert counting.hosts and set(counting.hosts) == {f"mcp.internal.test:{counting.port}"}
