"""OAuth 2.1 tool servers end to end (tools/oauth/): a real MCP server built on the official
SDK that is its own authorization server (tests/support/oauth_mcp_server.py), registered by
the operator with no secret, connected through the authorization URL and the platform's
``/oauth/callback``, called by agent runs whose tokens are refreshed and, once the grant is
revoked, a run that waits (``authorization_required``) until it is connected again; no token
anywhere it should not be; and the inputs an authorization server may get wrong, each
refused with a clear 4xx and nothing stored."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.models.loopback import LoopbackServer
from tenantry.tools.oauth import endpoints
from tests.support.api import Api
from tests.support.leaks import assert_no_token_in, readable_places
from tests.support.oauth_mcp_server import WHOAMI_TEXT, OAuthMcpServer
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes

SERVERS = "/admin/v1/tenants/{tenant}/tool-servers"


@pytest.fixture
async def whoami() -> AsyncIterator[OAuthMcpServer]:
    # 1-second access tokens: always within the platform's 60 s refresh margin, so every
    # use of one is preceded by a refresh (no clock to wait on).
    async with OAuthMcpServer(access_seconds=1) as server:
        yield server


@dataclass
class Story:
    """What the API answered along the way (for the no-token checks)."""

    tenant: str
    headers: dict[str, str]
    answers: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)


async def test_an_oauth_server_is_connected_refreshed_revoked_and_connected_again(
    api: Api, fakes: Fakes, worker: object, whoami: OAuthMcpServer
) -> None:
    await _story(api, whoami)


async def test_no_token_reaches_events_audit_prompts_logs_or_answers(
    api: Api, fakes: Fakes, worker: object, whoami: OAuthMcpServer,
    admin_conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    story = await _story(api, whoami)
    tokens = whoami.access_tokens + whoami.refresh_tokens
    assert len(tokens) >= 10  # issued by codes and refreshes: the checks below look for these
    story.answers += [str(await api.run(story.headers, run)) for run in story.run_ids]
    story.answers.append((await api.client.get(f"/v1/runs/{story.run_ids[-1]}/events",
                                               headers=story.headers)).text)
    places = await readable_places(admin_conn, fakes, caplog)
    assert_no_token_in({**places, "api": "\n".join(story.answers)}, tokens)


async def test_a_run_waiting_for_its_servers_connection_can_be_cancelled(
    api: Api, fakes: Fakes, worker: object, whoami: OAuthMcpServer,
) -> None:
    """Cancelled while it waits: it ends at once, and connecting the server later does not
    bring it back or make its call."""
    tenant, h = await api.tenant()
    story = Story(tenant, h)
    r = await api.client.post(SERVERS.format(tenant=tenant), headers=api.operator, json={
        "name": "whoami", "url": whoami.url, "honours_idempotency_keys": True})
    assert r.status_code == 201, r.text
    await _connect(api, story)
    agent = await api.agent(h, tools=["whoami"])
    whoami.revoke_refresh_tokens()
    run_id = await _start(api, story, agent)

    async def waiting() -> bool:
        return (await api.run(h, run_id)).get("waiting_reason") == "authorization_required"

    await until(waiting, "the run waits for its tool server's connection", 30)
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled", r.text
    await _connect(api, story)
    run = await api.run(h, run_id)
    assert run["status"] == "cancelled" and run["waiting_reason"] is None, run
    assert whoami.whoami_tokens == []  # its call was never made


async def _story(api: Api, whoami: OAuthMcpServer) -> Story:
    tenant, h = await api.tenant()
    story = Story(tenant, h)
    servers = SERVERS.format(tenant=tenant)

    # Registered with no secret: the server answered 401 with a Bearer challenge.
    r = await api.client.post(servers, headers=api.operator, json={
        "name": "whoami", "url": whoami.url, "honours_idempotency_keys": False})
    assert r.status_code == 201, r.text
    story.answers.append(r.text)
    server = r.json()
    assert server["tools"] == [] and server["oauth"]["status"] == "authorization_required"
    assert server["oauth"]["issuer"] == whoami.origin and server["oauth"]["grant"] == (
        "authorization_code")
    assert whoami.registrations == 0 and whoami.issued == []  # nothing asked for yet

    # Connected: the browser goes to the authorization URL and comes back to the callback.
    await _connect(api, story)
    assert (whoami.registrations, whoami.authorizations, whoami.code_exchanges) == (1, 1, 1)
    r = await api.client.get(f"{servers}/whoami", headers=api.operator)
    story.answers.append(r.text)
    server = r.json()
    assert server["oauth"]["status"] == "connected" and server["oauth"]["reason"] is None
    assert server["tools"] == ["whoami"]  # the first connection's list, pinned
    agent = await api.agent(h, tools=["whoami"])

    # A run calls the tool with a token the server issued.
    assert await _run(api, story, agent) == WHOAMI_TEXT
    assert len(whoami.whoami_tokens) == 1 and whoami.whoami_tokens[0] in whoami.access_tokens

    # The next run's token expires within the margin: refreshed first, the new one sent.
    refreshes, used = whoami.refreshes, set(whoami.whoami_tokens)
    assert await _run(api, story, agent) == WHOAMI_TEXT
    assert whoami.refreshes > refreshes
    newest = whoami.issued[-1]
    assert newest.grant == "refresh_token" and whoami.whoami_tokens[-1] == newest.access_token
    assert newest.access_token not in used and len(whoami.whoami_tokens) == 2

    # The person revokes the grant: the refresh is refused, the call is not made, the
    # server waits to be connected again, saying why, and so does the run: it does not
    # fail, and the model is told nothing.
    whoami.revoke_refresh_tokens()
    run_id = await _start(api, story, agent)

    async def waiting() -> bool:
        return (await api.run(h, run_id))["status"] == "waiting"

    await until(waiting, "the run waits for its tool server's connection", 30)
    run = await api.run(h, run_id)
    story.answers.append(str(run))
    assert run["waiting_reason"] == "authorization_required", run
    events = (await api.client.get(f"/v1/runs/{run_id}/events", headers={
        **h, "Accept": "application/json"})).json()["events"]
    parked = events[-1]
    assert parked["type"] == "RunParked", events
    assert parked["data"]["reason"] == "authorization_required", parked
    assert parked["data"]["tool_server"] == "whoami", parked
    assert not [e for e in events if e["type"] == "ToolCompleted"]
    assert len(whoami.whoami_tokens) == 2  # the tool did not run
    r = await api.client.get(f"{servers}/whoami", headers=api.operator)
    story.answers.append(r.text)
    oauth = r.json()["oauth"]
    assert oauth["status"] == "authorization_required"
    assert "refused to refresh" in oauth["reason"] and "invalid_grant" in oauth["reason"]
    assert oauth["expires_at"] is None
    assert r.json()["tools"] == ["whoami"]  # the pin stays

    # Connected again: the waiting run goes on by itself and makes its call, once, with a
    # token of the new authorization (the server does not honour keys: the call's
    # ToolStarted, written before it was refused, did not make it an unknown outcome).
    await _connect(api, story)
    assert whoami.authorizations == 2 and whoami.code_exchanges == 2
    assert whoami.registrations == 1  # the client registered once is used again
    assert await _said(api, story, run_id) == WHOAMI_TEXT
    assert len(whoami.whoami_tokens) == 3  # once per run
    assert whoami.whoami_tokens[-1] == whoami.access_tokens[-1]
    return story


async def _connect(api: Api, story: Story, name: str = "whoami") -> str:
    """Connect as the person authorizing would: open the URL, follow it back to the
    platform's callback. The callback URL (state and code), for replaying it."""
    r = await api.client.post(f"{SERVERS.format(tenant=story.tenant)}/{name}/connect",
                              headers=api.operator)
    assert r.status_code == 200, r.text
    story.answers.append(r.text)
    back = await api.client.get(r.json()["authorization_url"], follow_redirects=False)
    assert back.status_code == 302, back.text
    callback = back.headers["location"]
    assert callback.startswith(f"{api.base_url}/oauth/callback?")
    r = await api.client.get(callback)
    assert r.status_code == 200 and "is connected" in r.text, r.text
    story.answers.append(r.text)
    return callback


async def _run(api: Api, story: Story, agent: str) -> str:
    """A run calling the tool once and answering with what it returned."""
    return await _said(api, story, await _start(api, story, agent))


async def _start(api: Api, story: Story, agent: str) -> str:
    run_id = await api.start(story.headers, agent, scripted(call("whoami"),
                                                            answer("{last_tool_result}")))
    story.run_ids.append(run_id)
    return run_id


async def _said(api: Api, story: Story, run_id: str) -> str:
    """What the run's one tool call returned (or the error), once the run has finished."""
    events = await api.events_until_end(story.headers, run_id)
    assert events[-1]["type"] == "RunFinished", events[-1]
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert len(completed) == 1
    data: dict[str, Any] = completed[0]  # type: ignore[assignment]
    said = data.get("result") if data.get("result") is not None else data.get("error")
    return str(said)


# -- what an authorization server may get wrong -------------------------------------------


class FakeProtectedServer:
    """A small Starlette fake, neither an MCP server nor the SDK: ``/mcp`` answers every
    request 401 with the Bearer ``challenge``; any other path answers what ``documents``
    holds for it (status, body, headers), else 404. Every request's path is kept in
    ``hits``. For metadata no honest server serves, which the SDK cannot be made to."""

    def __init__(self) -> None:
        self.challenge = 'Bearer realm="fake"'
        self.documents: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self.hits: list[str] = []

        async def answer(request: Request) -> Response:
            self.hits.append(request.url.path)
            if request.url.path == "/mcp":
                return Response(b"", 401, {"WWW-Authenticate": self.challenge})
            status, body, headers = self.documents.get(request.url.path, (404, b"", {}))
            return Response(body, status, headers, media_type="application/json")

        app = Starlette(routes=[Route("/{path:path}", answer, methods=["GET", "POST"])])
        self._http = LoopbackServer(app)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._http.port}"

    async def __aenter__(self) -> FakeProtectedServer:
        await self._http.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._http.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeProtectedServer]:
    async with FakeProtectedServer() as server:
        yield server


async def _refused_registration(api: Api, url: str, said: str) -> None:
    """Registering ``url`` is refused with a 422 saying ``said``, and nothing is stored."""
    tenant, _ = await api.tenant()
    servers = SERVERS.format(tenant=tenant)
    r = await api.client.post(servers, headers=api.operator, json={
        "name": "guarded", "url": url, "honours_idempotency_keys": False})
    assert r.status_code == 422, r.text
    assert r.json()["type"] == "tool_server_authorization_failed", r.text
    assert said in r.json()["detail"], r.text
    r = await api.client.get(f"{servers}/guarded", headers=api.operator)
    assert r.status_code == 404, r.text
    r = await api.client.get(servers, headers=api.operator)
    assert r.json()["data"] == [], r.text


async def test_a_challenge_with_no_protected_resource_metadata_anywhere_stores_nothing(
    api: Api, fake: FakeProtectedServer
) -> None:
    await _refused_registration(api, f"{fake.origin}/mcp",
                                "no protected resource metadata found")
    # Both well-known places were looked at (RFC 9728 §3.1: path-aware, then the root).
    assert fake.hits.count("/.well-known/oauth-protected-resource/mcp") == 1
    assert fake.hits.count("/.well-known/oauth-protected-resource") == 1


async def test_authorization_server_metadata_that_is_not_json_stores_nothing(
    api: Api, fake: FakeProtectedServer
) -> None:
    fake.challenge = f'Bearer resource_metadata="{fake.origin}/prm"'
    fake.documents["/prm"] = (200, orjson.dumps({
        "resource": f"{fake.origin}/mcp", "authorization_servers": [f"{fake.origin}/as"]}), {})
    fake.documents["/.well-known/oauth-authorization-server/as"] = (
        200, b"<html>Welcome! {not: json</html>", {})
    await _refused_registration(api, f"{fake.origin}/mcp", "is not JSON")
    assert "/.well-known/oauth-authorization-server/as" in fake.hits


async def test_a_redirected_authorization_server_metadata_url_is_not_followed(
    api: Api, fake: FakeProtectedServer
) -> None:
    fake.challenge = f'Bearer resource_metadata="{fake.origin}/prm"'
    fake.documents["/prm"] = (200, orjson.dumps({
        "resource": f"{fake.origin}/mcp", "authorization_servers": [fake.origin]}), {})
    fake.documents["/.well-known/oauth-authorization-server"] = (
        302, b"", {"Location": f"{fake.origin}/elsewhere"})
    # What the redirect points at would be good metadata: it must not be read.
    fake.documents["/elsewhere"] = (200, orjson.dumps({
        "issuer": fake.origin, "authorization_endpoint": f"{fake.origin}/authorize",
        "token_endpoint": f"{fake.origin}/token"}), {})
    await _refused_registration(api, f"{fake.origin}/mcp", "(HTTP 302)")
    assert "/.well-known/oauth-authorization-server" in fake.hits
    assert "/elsewhere" not in fake.hits


async def _registered(api: Api, server: OAuthMcpServer) -> Story:
    tenant, h = await api.tenant()
    r = await api.client.post(SERVERS.format(tenant=tenant), headers=api.operator, json={
        "name": "whoami", "url": server.url, "honours_idempotency_keys": False})
    assert r.status_code == 201, r.text
    return Story(tenant, h)


async def _authorized(api: Api, story: Story) -> str:
    """Connect, and follow the authorization URL to where it sends the browser back (the
    platform's callback URL, not yet opened)."""
    r = await api.client.post(f"{SERVERS.format(tenant=story.tenant)}/whoami/connect",
                              headers=api.operator)
    assert r.status_code == 200, r.text
    back = await api.client.get(r.json()["authorization_url"], follow_redirects=False)
    assert back.status_code == 302, back.text
    return str(back.headers["location"])


async def _oauth_status(api: Api, story: Story) -> str:
    r = await api.client.get(f"{SERVERS.format(tenant=story.tenant)}/whoami",
                             headers=api.operator)
    return str(r.json()["oauth"]["status"])


async def test_a_callback_with_a_wrong_state_is_404_and_leaves_the_right_one_usable(
    api: Api, whoami: OAuthMcpServer
) -> None:
    story = await _registered(api, whoami)
    callback = await _authorized(api, story)
    query = parse_qs(urlsplit(callback).query)
    state, code = query["state"][0], query["code"][0]
    other, _ = await api.tenant("Other")
    for wrong in (f"{story.tenant}.{'x' * 32}", f"{other}.{state.partition('.')[2]}",
                  "no-tenant-here", state + "x", ""):
        r = await api.client.get("/oauth/callback", params={"state": wrong, "code": code})
        assert r.status_code == 404 and r.json()["type"] == "not_found", (wrong, r.text)
    assert whoami.code_exchanges == 0  # no wrong state reached the token endpoint
    assert await _oauth_status(api, story) == "authorization_required"
    r = await api.client.get(callback)
    assert r.status_code == 200 and "is connected" in r.text, r.text
    assert await _oauth_status(api, story) == "connected"


async def test_a_replayed_callback_is_404_and_the_server_stays_connected(
    api: Api, whoami: OAuthMcpServer
) -> None:
    story = await _registered(api, whoami)
    callback = await _authorized(api, story)
    r = await api.client.get(callback)
    assert r.status_code == 200, r.text
    r = await api.client.get(callback)
    assert r.status_code == 404 and r.json()["type"] == "not_found", r.text
    assert whoami.code_exchanges == 1  # the replayed code never reached the token endpoint
    assert await _oauth_status(api, story) == "connected"
    assert not any(t in r.text for t in whoami.access_tokens + whoami.refresh_tokens)


async def test_a_hanging_token_endpoint_is_given_up_with_a_clear_4xx(
    api: Api, whoami: OAuthMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The platform's own bound on a token request (15 s) would outlast this test client's
    # 10 s timeout; the API serves in this process, so the bound is shortened here.
    monkeypatch.setattr(endpoints, "TOKEN_TIMEOUT_S", 0.5)
    story = await _registered(api, whoami)
    callback = await _authorized(api, story)
    code = parse_qs(urlsplit(callback).query)["code"][0]
    whoami.hold_token_requests()
    r = await api.client.get(callback)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["type"] == "tool_server_authorization_failed"
    assert problem["detail"].startswith("the token request failed") and (
        "no answer within 0.5s" in problem["detail"]), problem
    assert code not in r.text and whoami.token_requests == 1
    assert await _oauth_status(api, story) == "authorization_required"
    # The authorization server answers again: connecting again works.
    whoami.release_token_requests()
    r = await api.client.get(await _authorized(api, story))
    assert r.status_code == 200 and "is connected" in r.text, r.text
    assert await _oauth_status(api, story) == "connected"
    everything = r.text + problem["detail"]
    assert not any(t in everything for t in whoami.access_tokens + whoami.refresh_tokens)
