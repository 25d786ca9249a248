"""The model gateway through the whole platform: registered accounts on real fake
providers (OpenAI and Anthropic wire formats over loopback HTTP), a real worker, the API.
Sticky routing, exact billing, opt-in fallback, data residency, tenants' own keys, the
failure ladder's bad answers, and the operator API's refusals."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from tenantry.db import Database
from tenantry.ledger.pricing import DEFAULT_PRICES
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import TEST_GATEWAY, Fakes, running_worker


@pytest.fixture
async def servers() -> AsyncIterator[list[FakeModelServer]]:
    async with (FakeModelServer(provider="openai") as a, FakeModelServer(provider="anthropic") as b,
                FakeModelServer(provider="openai") as c):
        yield [a, b, c]


def _inputs_seen(server: FakeModelServer) -> set[str]:
    """Which runs (by their unique input text) this provider answered."""
    seen = set()
    for request in server.requests:
        body = request.json()
        if not isinstance(body, dict):
            continue
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):  # Anthropic content blocks
                content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
            if message.get("role") == "user" and isinstance(content, str) \
                    and content.startswith("{"):
                seen.add(orjson.loads(content)["input"])
                break
    return seen


async def _finish(api: Api, h: dict[str, str], runs: list[str]) -> list[list[dict[str, object]]]:
    return list(await asyncio.gather(*(api.events_until_end(h, r, within=60) for r in runs)))


async def _status_is(api: Api, h: dict[str, str], run_id: str, status: str) -> bool:
    return (await api.run(h, run_id))["status"] == status


async def _true(value: bool) -> bool:
    return value


def _replies(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e["data"] for e in events if e["type"] == "ModelReplied"]  # type: ignore[misc]


async def test_every_step_of_a_run_hits_the_same_account_while_it_is_healthy(
    api: Api, fakes: Fakes, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    for name, server in zip(("acct-a", "acct-b", "acct-c"), servers, strict=True):
        provider = "anthropic" if server is servers[1] else "openai"
        await api.model_account(name, server.base_url, provider=provider,
                                secret=f"sk-{name}")
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    async with running_worker(database_dsn, None):
        runs = [await api.start(h, agent, scripted(
            call("echo", text="1"), call("echo", text="2"), answer("ok"), text=f"sticky-{i}"))
            for i in range(30)]
        results = await _finish(api, h, runs)
    for events in results:
        assert events[-1]["type"] == "RunFinished"
        assert len({r["account"] for r in _replies(events)}) == 1
        assert not [e for e in events if e["type"] in ("ModelRerouted", "ModelFallback")]
    # The providers agree: each run's calls all arrived at one server, and the runs were
    # spread over all three accounts (a stable hash of the run id, not one hot account).
    seen = [_inputs_seen(s) for s in servers]
    assert all(seen), [len(s) for s in seen]
    assert sum(len(s) for s in seen) == 30 and len(set().union(*seen)) == 30
    # Each account's own key went to its own provider, in that provider's header.
    assert {r.headers.get("authorization") for r in servers[0].requests} == {"Bearer sk-acct-a"}
    assert {r.headers.get("x-api-key") for r in servers[1].requests
            if r.path.endswith("/messages")} == {"sk-acct-b"}
    # Sticky routing is what makes the provider's prompt cache pay: later steps of a run
    # were served partly from cache.
    assert sum(u.cached_tokens for s in servers for u in s.usage_log) > 0


async def test_costs_equal_the_providers_own_usage_logs_exactly(
    api: Api, fakes: Fakes, servers: list[FakeModelServer], database_dsn: str,
    admin_conn: asyncpg.Connection,
) -> None:
    await api.model_account("acct-a", servers[0].base_url)
    await api.model_account("acct-b", servers[1].base_url, provider="anthropic")
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    async with running_worker(database_dsn, None):
        runs = [await api.start(h, agent, scripted(
            call("echo", text="x" * (i * 37)), call("echo", text="y"),
            answer("z" * (i + 1)), text=f"bill-{i}")) for i in range(24)]
        # A provider hiccup on the way: retried calls must not be billed twice.
        servers[0].fail_next(2, status=500)
        results = await _finish(api, h, runs)
    assert all(events[-1]["type"] == "RunFinished" for events in results), [
        [(e["type"], e["data"]) for e in events][-2:] for events in results
        if events[-1]["type"] != "RunFinished"]

    # Independently of the platform's pricing code: the per-million prices, integer
    # arithmetic, each call rounded up to a whole micro-dollar.
    price = DEFAULT_PRICES.prices["scripted"]
    expected = 0
    for record in (*servers[0].usage_log, *servers[1].usage_log):
        uncached = record.prompt_tokens - record.cached_tokens
        total = (uncached * price.input_per_m + record.cached_tokens * price.cached_input_per_m
                 + record.completion_tokens * price.output_per_m)
        expected += -(-total // 1_000_000)
    calls = len(servers[0].usage_log) + len(servers[1].usage_log)
    assert calls == sum(len(_replies(events)) for events in results) == 24 * 3
    assert any(r.cached_tokens for r in servers[0].usage_log)
    assert any(r.cached_tokens for r in servers[1].usage_log)

    from_events = sum(int(r["cost_micros"]) for events in results  # type: ignore[call-overload]
                      for r in _replies(events))
    from_runs = await admin_conn.fetchval("SELECT sum(cost_micros) FROM runs")
    from_api = 0
    for run_id in runs:
        from_api += int((await api.run(h, run_id))["cost_micros"])  # type: ignore[call-overload]
    assert from_events == from_runs == from_api == expected
    tokens = sum(r.prompt_tokens + r.completion_tokens
                 for s in servers[:2] for r in s.usage_log)
    assert await admin_conn.fetchval(
        "SELECT sum(input_tokens + output_tokens) FROM runs") == tokens


async def test_a_fallback_model_is_used_only_when_the_version_opted_in(
    api: Api, fakes: Fakes, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    primary, alternative = servers[0], servers[2]
    await api.model_account("primary", primary.base_url, models=["scripted"])
    await api.model_account("alt", alternative.base_url, models=["scripted/echo"])
    _, h = await api.tenant()
    strict = await api.agent(h, name="strict")
    flexible = await api.agent(h, name="flexible", fallback_models=["scripted/echo"])
    primary.set_mode("down")
    async with running_worker(database_dsn, None):
        parked = await api.start(h, strict, scripted(answer("strict done"), text="s"))
        fell_back = await api.start(h, flexible, scripted(answer("flexible done"), text="f"))
        events = await api.events_until_end(h, fell_back)
        assert [e["type"] for e in events] == [
            "RunCreated", "ModelFallback", "ModelReplied", "RunFinished"]
        fallback = events[1]["data"]
        assert fallback["from"] == "scripted" and fallback["to"] == "scripted/echo"
        assert fallback["reason"] == "the previous model did not answer"  # not why
        assert events[2]["data"]["model"] == "scripted/echo"
        assert events[2]["data"]["account"] == "alt"

        # Without the opt-in the run waits rather than change model behind the tenant.
        await until(lambda: _status_is(api, h, parked, "waiting"), "the strict run parks", 15)
        primary.set_mode("ok")
        events = await api.events_until_end(h, parked)
    kinds = [e["type"] for e in events]
    assert "ModelFallback" not in kinds
    assert kinds[-3:] == ["RunResumed", "ModelReplied", "RunFinished"]
    assert _replies(events)[0]["model"] == "scripted"
    assert alternative.usage_log and all(u.model == "scripted/echo"
                                         for u in alternative.usage_log)


async def test_a_run_that_fell_back_returns_to_its_model_and_says_so(
    api: Api, fakes: Fakes, servers: list[FakeModelServer], database_dsn: str, db: Database,
) -> None:
    primary, alternative = servers[0], servers[2]
    await api.model_account("primary", primary.base_url, models=["scripted"])
    await api.model_account("alt", alternative.base_url, models=["scripted/echo"])
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["slow"], fallback_models=["scripted/echo"])
    primary.set_mode("down")
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, scripted(call("slow", seconds=1.0),
                                                    answer("back home")))
        await until(lambda: _true(bool(alternative.usage_log)), "the fallback answers", 15)
        primary.set_mode("ok")  # back while the tool runs
        await asyncio.sleep(0.6)  # long enough for a probe to close its breaker
        events = await api.events_until_end(h, run_id)
    switches = [(e["data"]["from"], e["data"]["to"]) for e in events
                if e["type"] == "ModelFallback"]
    assert switches == [("scripted", "scripted/echo"), ("scripted/echo", "scripted")]
    assert [r["model"] for r in _replies(events)] == ["scripted/echo", "scripted"]
    # The switches are inputs to the loop, not decisions: replay still agrees.
    await check_and_record(db, tenant, run_id, "model-fallback-and-back")


async def test_a_hanging_provider_costs_a_timeout_then_the_call_moves_on(
    api: Api, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    hung, spare = servers[0], servers[2]
    await api.model_account("hung", hung.base_url, priority=0)
    await api.model_account("spare", spare.base_url, priority=1)
    _, h = await api.tenant()
    agent = await api.agent(h)
    hung.set_mode("hang")
    quick = dataclasses.replace(TEST_GATEWAY, call_timeout_seconds=0.5)
    async with running_worker(database_dsn, None, model_gateway=quick):
        run_id = await api.start(h, agent, scripted(answer("not stuck"), text="hang"))
        events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFinished"
    assert _replies(events)[0]["account"] == "spare"
    assert len(hung.requests) == TEST_GATEWAY.attempts_per_account


async def test_an_eu_tenant_parks_rather_than_leave_its_region(
    api: Api, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    us, eu = servers[0], servers[2]
    await api.model_account("us-main", us.base_url, region="us")
    await api.model_account("eu-main", eu.base_url, region="eu-west-1", priority=5)
    _, eu_h = await api.tenant("Euro GmbH", region="eu")
    _, us_h = await api.tenant("Yankee Inc")
    eu_agent = await api.agent(eu_h)
    us_agent = await api.agent(us_h)
    eu.set_mode("down")
    async with running_worker(database_dsn, None):
        eu_run = await api.start(eu_h, eu_agent, scripted(answer("stayed home"), text="eu"))
        us_run = await api.start(us_h, us_agent, scripted(answer("us ok"), text="us"))
        us_events = await api.events_until_end(us_h, us_run)
        assert _replies(us_events)[0]["account"] == "us-main"  # priority 0 for the rest
        await until(lambda: _status_is(api, eu_h, eu_run, "waiting"), "the EU run parks", 15)
        eu.set_mode("ok")
        events = await api.events_until_end(eu_h, eu_run)
    assert events[-1]["type"] == "RunFinished"
    assert [r["account"] for r in _replies(events)] == ["eu-main"]
    assert "eu" not in _inputs_seen(us)


async def test_a_tenants_own_key_serves_only_that_tenant(
    api: Api, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    platform, own = servers[0], servers[2]
    await api.model_account("platform", platform.base_url, secret="sk-platform")
    byok_tenant, byok_h = await api.tenant("Brings Keys")
    _, other_h = await api.tenant("Uses Ours")
    r = await api.client.put(f"/admin/v1/tenants/{byok_tenant}/secrets/openai",
                             json={"value": "sk-tenant-own"}, headers=api.operator)
    assert r.status_code == 201, r.text
    created = await api.model_account("byok-1", own.base_url, tenant=byok_tenant,
                                      secret_name="openai", rpm=600)
    assert created["tenant_id"] == byok_tenant and created["secret"] == "openai"
    byok_agent, other_agent = await api.agent(byok_h), await api.agent(other_h)
    async with running_worker(database_dsn, None):
        mine = await api.start(byok_h, byok_agent, scripted(answer("mine"), text="byok"))
        theirs = await api.start(other_h, other_agent, scripted(answer("ours"), text="plat"))
        mine_events = await api.events_until_end(byok_h, mine)
        theirs_events = await api.events_until_end(other_h, theirs)
    assert _replies(mine_events)[0]["account"] == "byok-1"
    assert _replies(theirs_events)[0]["account"] == "platform"
    assert _inputs_seen(own) == {"byok"} and _inputs_seen(platform) == {"plat"}
    assert {r.headers.get("authorization") for r in own.requests} == {"Bearer sk-tenant-own"}
    # The key is in the tenant's vault, never in the log.
    assert "sk-tenant-own" not in orjson.dumps(mine_events).decode()


@pytest.mark.parametrize("mode", ["malformed", "no_choices"])
async def test_unreadable_answers_climb_the_ladder_and_the_run_finishes(
    api: Api, servers: list[FakeModelServer], database_dsn: str, mode: str,
) -> None:
    bad, good = servers[0], servers[2]
    await api.model_account("bad", bad.base_url, priority=0)
    await api.model_account("good", good.base_url, priority=1)
    _, h = await api.tenant()
    agent = await api.agent(h)
    bad.set_mode(mode)  # type: ignore[arg-type]
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, scripted(answer("fine"), text="m"))
        events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFinished"
    assert _replies(events)[0]["account"] == "good"
    assert len(bad.requests) >= 3  # retried on the bad account before moving on


async def test_rate_limited_calls_wait_for_retry_after_on_the_same_account(
    api: Api, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    main, spare = servers[0], servers[2]
    await api.model_account("main", main.base_url, priority=0)
    await api.model_account("spare", spare.base_url, priority=1)
    _, h = await api.tenant()
    agent = await api.agent(h)
    main.fail_next(1, status=429, retry_after=0.5)
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, scripted(answer("patient"), text="429"))
        events = await api.events_until_end(h, run_id)
    chat = [r for r in main.requests if r.method == "POST"]
    assert len(chat) == 2 and not spare.requests
    assert _replies(events)[0]["account"] == "main"
    assert _replies(events)[0]["latency_ms"] >= 0  # the reply itself was quick
    assert events[-1]["created_at"] > events[0]["created_at"]


async def test_a_refused_request_fails_the_run_as_the_providers_doing(
    api: Api, servers: list[FakeModelServer], database_dsn: str,
) -> None:
    await api.model_account("main", servers[0].base_url)
    _, h = await api.tenant()
    agent = await api.agent(h)
    servers[0].fail_next(1, status=400)
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, scripted(answer("never"), text="400"))
        events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFailed"
    assert events[-1]["data"]["ours"] is False
    assert events[-1]["data"]["cause"] == "model_provider"


async def test_model_account_registration_refuses_bad_input_and_writes_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, _ = await api.tenant()
    good = {"account_id": "ok-1", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
            "models": ["scripted"], "region": "us"}
    cases: list[tuple[str, dict[str, object], int]] = [
        ("/admin/v1/model-accounts", {**good, "provider": "cohere"}, 400),
        ("/admin/v1/model-accounts", {**good, "base_url": "ftp://x"}, 400),
        ("/admin/v1/model-accounts", {**good, "models": []}, 400),
        # Well formed, naming what the platform has not got (yet): 409 with the field.
        ("/admin/v1/model-accounts", {**good, "models": ["no-such-model"]}, 409),
        ("/admin/v1/model-accounts", {**good, "models": ["sandbox"]}, 400),
        ("/admin/v1/model-accounts", {**good, "rpm": 0}, 400),
        ("/admin/v1/model-accounts", {**good, "region": "EU West"}, 400),
        ("/admin/v1/model-accounts", {**good, "surprise": 1}, 400),
        ("/admin/v1/model-accounts", {**good, "secret_name": "x"}, 400),
        (f"/admin/v1/tenants/{tenant}/model-accounts", {**good, "secret_name": "missing"}, 409),
        (f"/admin/v1/tenants/{tenant}/model-accounts", {**good, "secret": "sk"}, 400),
        ("/admin/v1/tenants/nobody-here/model-accounts", {**good, "secret_name": "k"}, 404),
    ]
    for path, body, status in cases:
        r = await api.client.post(path, json=body, headers=api.operator)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert await admin_conn.fetchval("SELECT count(*) FROM model_accounts") == 0
    r = await api.client.post("/admin/v1/model-accounts", json=good)
    assert r.status_code == 401
    r = await api.client.post("/admin/v1/model-accounts", json={**good, "secret": "sk-live-1"},
                              headers=api.operator)
    assert r.status_code == 201 and r.json()["has_secret"] is True
    assert "sk-live-1" not in r.text
    r = await api.client.post("/admin/v1/model-accounts", json=good, headers=api.operator)
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    sealed = await admin_conn.fetchval(
        "SELECT secret_sealed FROM model_accounts WHERE account_id = 'ok-1'")
    assert b"sk-live-1" not in bytes(sealed)
    listed = (await api.client.get("/admin/v1/model-accounts", headers=api.operator)).json()
    assert [a["account_id"] for a in listed["data"]] == ["ok-1"]
    assert "sk-live-1" not in str(listed)
    r = await api.client.delete("/admin/v1/model-accounts/ok-1", headers=api.operator)
    assert r.status_code == 200 and r.json()["enabled"] is False
    r = await api.client.delete("/admin/v1/model-accounts/ok-1", headers=api.operator)
    assert r.status_code == 404
