"""Prices as operator data, through the real API and a real worker: any model the operator
prices can be served and is billed at the price in force; a later price never changes an
earlier call's cost; an unpriced model is refused, saying how to price it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.ledger.prices import PriceBook
from tenantry.testing.fake_model import FakeModelServer, UsageRecord
from tests.support.api import Api
from tests.support.scripts import answer, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FIRST = {"input_per_m": 2_000_000, "cached_input_per_m": 500_000, "output_per_m": 7_000_000}
LATER = {"input_per_m": 3_000_000, "cached_input_per_m": 600_000, "output_per_m": 9_000_000}


def billed(records: list[UsageRecord], price: dict[str, int]) -> int:
    """Independently of the platform's pricing code: what the fake provider reported, at the
    per-million prices, each call rounded up to a whole micro-dollar."""
    total = 0
    for r in records:
        micros = ((r.prompt_tokens - r.cached_tokens) * price["input_per_m"]
                  + r.cached_tokens * price["cached_input_per_m"]
                  + r.completion_tokens * price["output_per_m"])
        total += -(-micros // 1_000_000)
    return total


async def put_price(api: Api, model: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await api.client.put(f"/admin/v1/prices/{model}", json=body, headers=api.operator)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def replies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "ModelReplied"]


async def test_a_model_the_platform_never_heard_of_is_served_once_priced(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    first = await put_price(api, LLAMA, FIRST)
    assert first["source"] == "operator" and first["in_force"] is True
    assert first["version"] == f"{LLAMA}@{first['effective_from'].replace('Z', '+00:00')}"
    async with FakeModelServer() as provider:
        await api.model_account("llama", provider.base_url, models=[LLAMA])
        _, h = await api.tenant()
        agent = await api.agent(h, model=LLAMA)
        script = scripted(answer("one"), text="first run")
        async with running_worker(database_dsn, None):  # only the registered account
            run_1 = await api.start(h, agent, script)
            events_1 = await api.events_until_end(h, run_1)
            first_calls = list(provider.usage_log)
            await put_price(api, LLAMA, LATER)  # from now: the next run's calls
        async with running_worker(database_dsn, None):
            run_2 = await api.start(h, agent, scripted(answer("two"), text="second run"))
            events_2 = await api.events_until_end(h, run_2)
            second_calls = provider.usage_log[len(first_calls):]
    assert events_1[-1]["type"] == events_2[-1]["type"] == "RunFinished"
    assert [r.model for r in provider.usage_log] == [LLAMA, LLAMA]
    cost_1, cost_2 = billed(first_calls, FIRST), billed(second_calls, LATER)
    assert cost_1 > 0 and cost_2 > 0
    assert (await api.run(h, run_1))["cost_micros"] == cost_1
    assert (await api.run(h, run_2))["cost_micros"] == cost_2
    # Each call says which version billed it; the later price left the earlier bill alone.
    assert [d["price_version"] for d in replies(events_1)] == [first["version"]]
    later_version = replies(events_2)[0]["price_version"]
    assert later_version.startswith(f"{LLAMA}@") and later_version != first["version"]
    facts = await admin_conn.fetch(
        "SELECT cost_micros, price_version FROM usage_facts ORDER BY created_at")
    assert [(f["cost_micros"], f["price_version"]) for f in facts] == [
        (cost_1, first["version"]), (cost_2, later_version)]
    usage = (await api.client.get("/v1/usage", headers=h)).json()["total"]
    assert usage["cost_micros"] == cost_1 + cost_2 and usage["calls"] == 2


async def test_an_unpriced_model_is_refused_saying_how_to_price_it(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    body = {"account_id": "qwen", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
            "models": ["scripted", "qwen2.5:7b"], "region": "us"}
    r = await api.client.post("/admin/v1/model-accounts", json=body, headers=api.operator)
    # The request is well formed; the platform has no price yet (pricing it is the fix).
    assert r.status_code == 409, r.text
    problem = r.json()
    assert (problem["type"], problem["field"], problem["models"]) == (
        "conflict", "models", ["qwen2.5:7b"])
    assert "no price for qwen2.5:7b" in problem["detail"]
    assert "PUT /admin/v1/prices/qwen2.5:7b" in problem["detail"]
    assert await admin_conn.fetchval("SELECT count(*) FROM model_accounts") == 0
    # A price scheduled for later does not price it now.
    soon = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    await put_price(api, "qwen2.5:7b", {**FIRST, "effective_from": soon})
    r = await api.client.post("/admin/v1/model-accounts", json=body, headers=api.operator)
    assert r.status_code == 409 and "qwen2.5:7b" in r.json()["detail"]
    await put_price(api, "qwen2.5:7b", FIRST)
    r = await api.client.post("/admin/v1/model-accounts", json=body, headers=api.operator)
    assert r.status_code == 201, r.text
    r = await api.client.post("/admin/v1/model-accounts", headers=api.operator,
                              json={**body, "account_id": "sbx", "models": ["sandbox"]})
    assert r.status_code == 400 and "reserved" in r.json()["detail"]


async def unchecked_agent(api: Api, tenant: str, name: str, **spec: Any) -> str:
    created = await agents.create_agent(api.platform.db, TenantId.parse(tenant), name,
                                        AgentSpec(system_prompt="Be brief.", **spec))
    return str(created.agent_id)


async def test_an_agent_on_an_unpriced_model_is_refused_saying_how_to_price_it(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    """Its runs could never be served: publishing it is refused (422), naming the model and
    the operator's way to price it; once priced, the same request publishes it."""
    _, h = await api.tenant()
    cases = [({"model": "qwen2.5:7b"}, "model"),
             ({"model": "scripted", "fallback_models": ["gpt-4o", "qwen2.5:7b"]},
              "fallback_models"),
             ({"model": "scripted", "summarize": {"after_tokens": 1000, "model": "qwen2.5:7b"}},
              "summarize.model")]
    for spec, field in cases:
        body = {"name": "qwen", "system_prompt": "Be brief.", **spec}
        r = await api.client.post("/v1/agents", json=body, headers=h)
        assert r.status_code == 422, r.text
        problem = r.json()
        assert r.headers["content-type"] == "application/problem+json"
        assert (problem["type"], problem["field"], problem["models"]) == (
            "unpriced_model", field, ["qwen2.5:7b"])
        assert "PUT /admin/v1/prices/qwen2.5:7b" in problem["detail"]
    priced = (await api.client.post("/v1/agents", json={
        "name": "priced", "model": "scripted", "system_prompt": ""}, headers=h)).json()
    r = await api.client.post(f"/v1/agents/{priced['agent_id']}/versions", headers=h,
                              json={"model": "qwen2.5:7b", "system_prompt": ""})
    assert r.status_code == 422 and r.json()["models"] == ["qwen2.5:7b"], r.text
    assert await admin_conn.fetchval("SELECT count(*) FROM agent_versions") == 1
    await put_price(api, "qwen2.5:7b", FIRST)
    for index, (spec, _) in enumerate(cases):
        r = await api.client.post("/v1/agents", headers=h, json={
            "name": f"qwen-{index}", "system_prompt": "", **spec})
        assert r.status_code == 201, r.text


async def test_a_wildcard_account_never_serves_an_unpriced_model_for_free(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    """The configured account (TENANTRY_MODEL_BASE_URL) serves `*`: a run on a model with
    no price fails before anything is sent, with the way to price it. (The API refuses to
    publish such an agent; these are published below it, as an agent published before
    that check was.)"""
    tenant, h = await api.tenant()
    agent = await unchecked_agent(api, tenant, "unpriced", model="mistral-small-24b")
    fallback = await unchecked_agent(api, tenant, "fallback", model="scripted",
                                     fallback_models=("no-price/at-all",))
    async with running_worker(database_dsn, fakes.model.base_url):
        run = await api.start(h, agent, scripted(answer("never")))
        events = await api.events_until_end(h, run)
        other = await api.start(h, fallback, scripted(answer("never")))
        other_events = await api.events_until_end(h, other)
    for ended, model in ((events[-1], "mistral-small-24b"),
                         (other_events[-1], "no-price/at-all")):
        assert ended["type"] == "RunFailed"
        assert ended["data"]["cause"] == "unpriced_model" and ended["data"]["ours"] is False
        assert f"PUT /admin/v1/prices/{model}" in ended["data"]["error"]
    assert fakes.model.usage_log == []  # never sent, so never served at price 0
    assert await admin_conn.fetchval("SELECT count(*) FROM usage_facts") == 0
    failed = await api.run(h, run)
    assert failed["status"] == "failed" and failed["cost_micros"] == 0


async def test_bad_price_input_is_refused_and_writes_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    cases: list[tuple[str, object]] = [
        (LLAMA, {**FIRST, "input_per_m": -1}),
        (LLAMA, {**FIRST, "output_per_m": 2**63}),
        (LLAMA, {**FIRST, "output_per_m": 1.5}),
        (LLAMA, {**FIRST, "output_per_m": "100"}),
        (LLAMA, {**FIRST, "output_per_m": True}),
        (LLAMA, {"input_per_m": 1, "output_per_m": 1}),  # cached_input_per_m missing
        (LLAMA, {**FIRST, "per_second_micros": 5}),
        (LLAMA, {**FIRST, "surprise": 1}),
        (LLAMA, {**FIRST, "effective_from": "2030-01-01T00:00:00"}),  # no timezone
        (LLAMA, {**FIRST, "effective_from": "tomorrow"}),
        (LLAMA, [FIRST]),
        ("bad%00model", FIRST),
        ("tab%09model", FIRST),
        ("family/*", FIRST),
        ("x" * 201, FIRST),
        ("sandbox", FIRST),
        ("sandbox", {"per_second_micros": -1}),
        ("sandbox", {"per_second_micros": 10, "input_per_m": 1}),
    ]
    for model, body in cases:
        r = await api.client.put(f"/admin/v1/prices/{model}", json=body, headers=api.operator)
        assert r.status_code == 400, (model, body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == "validation_error"
    # Well formed, but the time it names has passed (calls were billed since): 409.
    r = await api.client.put(f"/admin/v1/prices/{LLAMA}", headers=api.operator,
                             json={**FIRST, "effective_from": past})
    assert r.status_code == 409, r.text
    assert (r.json()["type"], r.json()["field"]) == ("conflict", "effective_from")
    r = await api.client.put(f"/admin/v1/prices/{LLAMA}", json=FIRST)
    assert r.status_code == 401
    assert await admin_conn.fetchval("SELECT count(*) FROM model_prices") == 0


async def test_a_whole_number_written_with_a_fraction_part_is_an_integer(api: Api) -> None:
    """JSON Schema's `integer` is a number without a fraction: 7000000.0 is one (a
    client's encoder may write it so); 1.5 is not (above)."""
    body = {**FIRST, "output_per_m": float(FIRST["output_per_m"])}
    r = await api.client.put(f"/admin/v1/prices/{LLAMA}", json=body, headers=api.operator)
    assert r.status_code == 201, r.text
    assert r.json()["output_per_m"] == FIRST["output_per_m"]


async def test_a_version_is_never_changed_only_succeeded(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    body = {**FIRST, "effective_from": at.isoformat()}
    created = await put_price(api, "qwen2.5:7b", body)
    r = await api.client.put("/admin/v1/prices/qwen2.5:7b", json=body, headers=api.operator)
    assert r.status_code == 200 and r.json() == created  # the same version again: as it is
    r = await api.client.put("/admin/v1/prices/qwen2.5:7b", headers=api.operator,
                             json={**LATER, "effective_from": at.isoformat()})
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    assert await admin_conn.fetchval("SELECT count(*) FROM model_prices") == 1
    with pytest.raises(asyncpg.PostgresError):  # versions are immutable in the database too
        await admin_conn.execute("UPDATE model_prices SET output_per_m = 0")
    assert await admin_conn.fetchval("SELECT output_per_m FROM model_prices") == 7_000_000


async def test_prices_are_listed_with_the_defaults_and_each_models_history(api: Api) -> None:
    await put_price(api, "gpt-4o", {**FIRST, "cache_write_per_m": 2_500_000})
    await put_price(api, LLAMA, FIRST)
    later = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    await put_price(api, LLAMA, {**LATER, "effective_from": later})
    await put_price(api, "sandbox", {"per_second_micros": 40})

    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = await api.client.get("/admin/v1/prices", params=params, headers=api.operator)
        assert r.status_code == 200, r.text
        page = r.json()
        seen += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    by_model = {p["model"]: p for p in seen}
    assert [p["model"] for p in seen] == sorted(by_model)  # each once, in name order
    assert by_model["gpt-4o"]["source"] == "operator"
    assert by_model["gpt-4o"]["cache_write_per_m"] == 2_500_000
    assert by_model["gpt-4o-mini"]["source"] == "default"
    assert by_model["gpt-4o-mini"]["effective_from"] is None
    assert by_model[LLAMA]["output_per_m"] == FIRST["output_per_m"]  # the later one waits
    assert by_model["sandbox"]["per_second_micros"] == 40
    assert by_model["sandbox"]["input_per_m"] is None

    r = await api.client.get(f"/admin/v1/prices/{LLAMA}", headers=api.operator)
    assert r.status_code == 200
    history = r.json()["data"]
    assert [(v["output_per_m"], v["in_force"]) for v in history] == [
        (LATER["output_per_m"], False), (FIRST["output_per_m"], True)]
    r = await api.client.get("/admin/v1/prices/gpt-4o", headers=api.operator)
    assert [(v["source"], v["in_force"]) for v in r.json()["data"]] == [
        ("operator", True), ("default", False)]
    r = await api.client.get("/admin/v1/prices/nobody/knows", headers=api.operator)
    assert r.status_code == 404 and "PUT /admin/v1/prices/nobody/knows" in r.json()["detail"]


async def test_a_workers_book_takes_a_new_price_within_its_refresh(
    api: Api, database_dsn: str,
) -> None:
    """A long-lived worker's cached prices: a version starting now reaches it within the
    refresh time; a scheduled one applies from exactly its effective_from."""
    db = await Database.connect(database_dsn, min_size=1, max_size=2)
    try:
        book = PriceBook(db, refresh_seconds=0.2)
        assert await book.quote(LLAMA) is None
        first = await put_price(api, LLAMA, FIRST)
        quote = await book.quote(LLAMA)  # a miss reloads: priced just now is served
        assert quote is not None and quote.version == first["version"]
        later = await put_price(api, LLAMA, LATER)

        async def current() -> bool:
            quoted = await book.quote(LLAMA)
            return quoted is not None and quoted.version == later["version"]

        await until(current, "the worker's book took the new price", 10)
        at = datetime.now(UTC) + timedelta(hours=2)
        scheduled = await put_price(api, LLAMA, {**FIRST, "output_per_m": 1,
                                                 "effective_from": at.isoformat()})
        await book.refresh()
        before = await book.quote(LLAMA, at=at - timedelta(microseconds=1))
        after = await book.quote(LLAMA, at=at)
        assert before is not None and before.version == later["version"]
        assert after is not None and after.version == scheduled["version"]
        assert after.price.output_per_m == 1
        # The sandbox's price is a version like any other.
        assert (await book.sandbox()).version == "sandbox@default-2026-12-01"
        sandbox = await put_price(api, "sandbox", {"per_second_micros": 99})
        await book.refresh()
        assert (await book.sandbox()).version == sandbox["version"]
    finally:
        await db.close()


async def test_a_model_in_a_priced_family_is_billed_at_the_familys_price(
    api: Api, database_dsn: str,
) -> None:
    """`family/*` accounts: a member without its own price bills at the family's."""
    await put_price(api, "acme", FIRST)
    async with FakeModelServer() as provider:
        await api.model_account("acme", provider.base_url, models=["acme/*"])
        _, h = await api.tenant()
        agent = await api.agent(h, model="acme/large-v2")
        async with running_worker(database_dsn, None):
            run = await api.start(h, agent, scripted(answer("done")))
            events = await api.events_until_end(h, run)
    assert events[-1]["type"] == "RunFinished", events[-1]
    assert {d["price_version"].split("@")[0] for d in replies(events)} == {"acme"}
    assert (await api.run(h, run))["cost_micros"] == billed(provider.usage_log, FIRST)


async def test_the_openapi_document_declares_the_price_routes_and_their_rules(
    api: Api,
) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    put = doc["paths"]["/admin/v1/prices/{model}"]["put"]
    assert set(put["responses"]) >= {"200", "201", "400", "401", "404", "409", "413"}
    (model,) = put["parameters"]
    assert model["in"] == "path" and model["schema"]["maxLength"] == 200
    assert "pattern" in model["schema"]
    assert model["schema"]["not"] == {"const": "sandbox"}  # its own operations
    body = doc["components"]["schemas"]["PutPrice"]
    assert body["additionalProperties"] is False
    assert set(body["required"]) == {"input_per_m", "cached_input_per_m", "output_per_m"}
    for name in ("input_per_m", "cached_input_per_m", "output_per_m"):
        number = body["properties"][name]
        assert (number["minimum"], number["maximum"]) == (0, 2**63 - 1), name
    (number, _) = body["properties"]["cache_write_per_m"]["anyOf"]
    assert (number["minimum"], number["maximum"]) == (0, 2**63 - 1)
    assert body["properties"]["effective_from"]["anyOf"][0]["format"] == "date-time"
    sandbox = doc["paths"]["/admin/v1/prices/sandbox"]
    assert set(sandbox) == {"get", "put"}
    ref = sandbox["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert body["required"] == ["per_second_micros"] and body["additionalProperties"] is False
    assert "409" in sandbox["put"]["responses"]
    listing = doc["paths"]["/admin/v1/prices"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {"cursor", "limit"}
    assert "get" in doc["paths"]["/admin/v1/prices/{model}"]
