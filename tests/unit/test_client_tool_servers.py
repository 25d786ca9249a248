"""The client SDK's calls for a tenant's own tool servers and secrets, without a server:
the requests each sends, the typed answers it reads, which are sent again after a refusal,
and that the blocking and asyncio clients send the same. (Against the real routes:
tests/integration/test_tenant_tool_servers_sdk.py.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx2
import orjson
import pytest

from tenantry.client import (
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    Overloaded,
    Secret,
    ToolServer,
    ToolServerConnection,
    ToolServerOAuth,
    ToolServerUrlRefused,
)

CREATED = "2025-03-01T12:00:00Z"
LATER = "2025-03-02T08:30:00Z"
SECRET = {"name": "crm-token", "created_at": CREATED, "updated_at": CREATED}
SERVER: dict[str, Any] = {
    "server_id": "tsv_1", "name": "crm", "url": "https://crm.example.com/mcp",
    "honours_idempotency_keys": True, "secret": "crm-token", "tools": ["lookup", "refund"],
    "tools_sha256": "ab" * 32, "call_timeout_seconds": 30, "registered_by": "tenant",
    "created_at": CREATED, "oauth": None}
OAUTH_SERVER: dict[str, Any] = {
    **SERVER, "name": "hosted", "secret": None, "tools": [],
    "oauth": {"status": "authorization_required", "reason": "not connected yet",
              "grant": "authorization_code", "scope": "tools.read",
              "issuer": "https://auth.example.com", "expires_at": None,
              "connected_at": None}}
AUTHORIZE = "https://auth.example.com/authorize?state=s1"


class Platform:
    """A mock transport that records each request and gives the next of its answers."""

    def __init__(self, *answers: httpx2.Response) -> None:
        self.answers = list(answers)
        self.seen: list[httpx2.Request] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request)
        return self.answers.pop(0)

    def client(self) -> Client:
        return Client("http://platform.test", "tnt_k", transport=httpx2.MockTransport(
            self.handler))

    def aclient(self) -> AsyncClient:
        return AsyncClient("http://platform.test", "tnt_k",
                           transport=httpx2.MockTransport(self.handler))

    def sent(self) -> list[tuple[str, str, Any]]:
        """Each request as (method, path with query, JSON body or None)."""
        return [(r.method, r.url.raw_path.decode(),
                 orjson.loads(r.content) if r.content else None) for r in self.seen]


def ok(body: Any, status: int = 200) -> httpx2.Response:
    return httpx2.Response(status, json=body)


def problem(status: int, type_: str, detail: str = "d", **headers: str) -> httpx2.Response:
    return httpx2.Response(status, headers={"content-type": "application/problem+json",
                                            **headers},
                           content=orjson.dumps({"type": type_, "title": "t",
                                                 "status": status, "detail": detail}))


def test_secrets_are_put_listed_read_and_deleted_and_never_carry_a_value() -> None:
    platform = Platform(ok(SECRET, 201), ok({**SECRET, "updated_at": LATER}),
                        ok({"data": [SECRET], "next_cursor": "crm-token"}),
                        ok({"data": [], "next_cursor": None}), ok(SECRET),
                        httpx2.Response(204))
    with platform.client() as client:
        stored = client.secrets.put("crm-token", "sk_live_1")
        replaced = client.secrets.put("crm-token", "sk_live_2")
        first = client.secrets.list(limit=1)
        rest = client.secrets.list(limit=1, cursor=first.next_cursor)
        found = client.secrets.get("crm-token")
        assert client.secrets.delete("crm-token") is None
    assert platform.sent() == [
        ("PUT", "/v1/secrets/crm-token", {"value": "sk_live_1"}),
        ("PUT", "/v1/secrets/crm-token", {"value": "sk_live_2"}),
        ("GET", "/v1/secrets?limit=1", None),
        ("GET", "/v1/secrets?limit=1&cursor=crm-token", None),
        ("GET", "/v1/secrets/crm-token", None),
        ("DELETE", "/v1/secrets/crm-token", None)]
    assert stored == Secret("crm-token", datetime(2025, 3, 1, 12, tzinfo=UTC),
                            datetime(2025, 3, 1, 12, tzinfo=UTC))
    assert not stored.replaced and replaced.replaced
    assert [s.name for s in first] == ["crm-token"] and list(rest) == []
    assert rest.next_cursor is None and found == stored
    # What a person reads of a secret: no value, in any field or in its repr.
    assert "sk_live" not in repr(stored) and not hasattr(stored, "value")


def test_a_server_is_read_typed_with_its_pin_and_who_registered_it() -> None:
    server = ToolServer.from_json(SERVER)
    assert (server.name, server.url, server.secret, server.tools, server.registered_by) == (
        "crm", "https://crm.example.com/mcp", "crm-token", ("lookup", "refund"), "tenant")
    assert server.honours_idempotency_keys and server.call_timeout_seconds == 30
    assert server.oauth is None and server.raw["tools_sha256"] == "ab" * 32
    hosted = ToolServer.from_json(OAUTH_SERVER)
    assert hosted.oauth == ToolServerOAuth(
        "authorization_required", "not connected yet", "authorization_code", "tools.read",
        "https://auth.example.com", None, None)
    assert not hosted.oauth.connected and hosted.tools == ()
    # An answer from a platform older than tenants' own servers: the operator's.
    old = {k: v for k, v in SERVER.items() if k != "registered_by"}
    assert ToolServer.from_json(old).registered_by == "operator"


def test_a_server_is_registered_listed_pinned_connected_and_removed() -> None:
    connected = {**OAUTH_SERVER["oauth"], "status": "connected", "reason": None,
                 "expires_at": LATER, "connected_at": CREATED}
    platform = Platform(ok(SERVER, 201), ok(OAUTH_SERVER, 201),
                        ok({"data": [SERVER, OAUTH_SERVER], "next_cursor": None}),
                        ok(SERVER), ok({**SERVER, "tools": ["lookup"]}),
                        ok({"authorization_url": AUTHORIZE, "server": OAUTH_SERVER}),
                        ok({"authorization_url": None,
                            "server": {**OAUTH_SERVER, "oauth": connected}}),
                        httpx2.Response(204))
    with platform.client() as client:
        crm = client.tool_servers.register("crm", "https://crm.example.com/mcp",
                                           honours_idempotency_keys=True, secret="crm-token")
        client.tool_servers.register(
            "hosted", "https://hosted.example.com/mcp", honours_idempotency_keys=False,
            oauth={"grant": "client_credentials", "client_id": "c1", "client_secret": "cs"},
            call_timeout_seconds=600)
        listed = client.tool_servers.list()
        assert client.tool_servers.get("crm") == crm
        repinned = client.tool_servers.pin("crm")
        started = client.tool_servers.connect("hosted")
        at_once = client.tool_servers.connect("hosted")
        assert client.tool_servers.remove("crm") is None
    assert platform.sent() == [
        ("POST", "/v1/tool-servers", {"name": "crm", "url": "https://crm.example.com/mcp",
                                      "honours_idempotency_keys": True,
                                      "secret": "crm-token"}),
        ("POST", "/v1/tool-servers", {
            "name": "hosted", "url": "https://hosted.example.com/mcp",
            "honours_idempotency_keys": False, "call_timeout_seconds": 600,
            "oauth": {"grant": "client_credentials", "client_id": "c1",
                      "client_secret": "cs"}}),
        ("GET", "/v1/tool-servers", None),
        ("GET", "/v1/tool-servers/crm", None),
        ("POST", "/v1/tool-servers/crm/pin", None),
        ("POST", "/v1/tool-servers/hosted/connect", None),
        ("POST", "/v1/tool-servers/hosted/connect", None),
        ("DELETE", "/v1/tool-servers/crm", None)]
    assert [s.name for s in listed] == ["crm", "hosted"] and listed.next_cursor is None
    assert repinned.tools == ("lookup",)
    assert isinstance(started, ToolServerConnection)
    assert started.authorization_url == AUTHORIZE and started.server.name == "hosted"
    assert at_once.authorization_url is None
    assert at_once.server.oauth is not None and at_once.server.oauth.connected
    assert at_once.server.oauth.expires_at == datetime(2025, 3, 2, 8, 30, tzinfo=UTC)


def test_names_are_quoted_into_the_path_so_none_reaches_another_route() -> None:
    platform = Platform(problem(404, "not_found"), problem(404, "not_found"))
    with platform.client() as client:
        with pytest.raises(NotFound):
            client.secrets.get("../tool-servers/crm")
        with pytest.raises(NotFound):
            client.tool_servers.get("crm/pin")
    assert [path for _, path, _ in platform.sent()] == [
        "/v1/secrets/..%2Ftool-servers%2Fcrm", "/v1/tool-servers/crm%2Fpin"]


NO_PAGE: dict[str, Any] = {"data": [], "next_cursor": None}


@pytest.mark.parametrize(("call", "answer", "retried"), [
    (lambda c: c.secrets.put("s", "v"), SECRET, True),
    (lambda c: c.secrets.list(), NO_PAGE, True),
    (lambda c: c.tool_servers.get("crm"), SERVER, True),
    (lambda c: c.tool_servers.pin("crm"), SERVER, True),
    # A second attempt after the first landed would answer 409 or 404, or authorize twice.
    (lambda c: c.secrets.delete("s"), None, False),
    (lambda c: c.tool_servers.register("crm", "https://crm.example.com/mcp",
                                       honours_idempotency_keys=True), SERVER, False),
    (lambda c: c.tool_servers.connect("crm"), None, False),
    (lambda c: c.tool_servers.remove("crm"), None, False),
], ids=["put_secret", "list_secrets", "get", "pin", "delete_secret", "register", "connect",
        "remove"])
def test_only_what_is_safe_to_repeat_is_sent_again_after_a_refusal(
        call: Callable[[Client], Any], answer: Any, retried: bool) -> None:
    platform = Platform(problem(503, "overloaded", **{"retry-after": "0"}), ok(answer))
    with platform.client() as client:
        if retried:
            call(client)
        else:
            with pytest.raises(Overloaded):
                call(client)
    assert len(platform.seen) == (2 if retried else 1)


def test_refusals_are_typed_the_refused_url_by_its_problem_type() -> None:
    platform = Platform(problem(422, "tool_server_url_refused",
                                "url: 127.0.0.1 is a loopback address"),
                        problem(409, "conflict", "tool server 'crm' sends this secret"))
    with platform.client() as client:
        with pytest.raises(ToolServerUrlRefused) as refused:
            client.tool_servers.register("local", "http://127.0.0.1:9000/mcp",
                                         honours_idempotency_keys=True)
        with pytest.raises(Conflict, match="sends this secret"):
            client.secrets.delete("crm-token")
    assert refused.value.status == 422 and refused.value.type == "tool_server_url_refused"
    assert "loopback" in refused.value.detail


async def test_the_async_client_sends_the_same_requests() -> None:
    def answers() -> list[httpx2.Response]:  # a response is read once: one set each
        return [ok(SECRET, 201), ok({"data": [SECRET], "next_cursor": None}), ok(SECRET),
                httpx2.Response(204), ok(SERVER, 201),
                ok({"data": [SERVER], "next_cursor": None}), ok(SERVER), ok(SERVER),
                ok({"authorization_url": AUTHORIZE, "server": OAUTH_SERVER}),
                httpx2.Response(204)]

    async def tour_async(client: AsyncClient) -> list[Any]:
        return [await client.secrets.put("crm-token", "v"), await client.secrets.list(),
                await client.secrets.get("crm-token"),
                await client.secrets.delete("crm-token"),
                await client.tool_servers.register(
                    "crm", "https://crm.example.com/mcp", honours_idempotency_keys=True,
                    secret="crm-token", call_timeout_seconds=60),
                await client.tool_servers.list(limit=5), await client.tool_servers.get("crm"),
                await client.tool_servers.pin("crm"), await client.tool_servers.connect("hosted"),
                await client.tool_servers.remove("crm")]

    def tour(client: Client) -> list[Any]:
        return [client.secrets.put("crm-token", "v"), client.secrets.list(),
                client.secrets.get("crm-token"), client.secrets.delete("crm-token"),
                client.tool_servers.register(
                    "crm", "https://crm.example.com/mcp", honours_idempotency_keys=True,
                    secret="crm-token", call_timeout_seconds=60),
                client.tool_servers.list(limit=5), client.tool_servers.get("crm"),
                client.tool_servers.pin("crm"), client.tool_servers.connect("hosted"),
                client.tool_servers.remove("crm")]

    blocking, asynchronous = Platform(*answers()), Platform(*answers())
    with blocking.client() as client:
        read = tour(client)
    async with asynchronous.aclient() as aclient:
        aread = await tour_async(aclient)
    assert asynchronous.sent() == blocking.sent() and aread == read
