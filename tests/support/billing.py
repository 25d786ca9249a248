"""Billing tests' pieces: the admin key and prices of the fake providers (the fixture
``providers``, in billing_fixtures.py), and traffic through both."""

from __future__ import annotations

from tenantry.ledger.pricing import DEFAULT_PRICES
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

ADMIN_KEY = "sk-admin-billing-test-5f1e"
_PRICE = DEFAULT_PRICES.prices["scripted"]
PRICES = {"scripted": (_PRICE.input_per_m, _PRICE.cached_input_per_m, _PRICE.output_per_m)}


async def run_traffic(api: Api, fakes: Fakes, database_dsn: str) -> None:
    """Three runs per account: a tenant in `us` uses only the OpenAI account, one in `eu`
    only the Anthropic account (data residency makes the routing certain)."""
    started = []
    for region in ("us", "eu"):
        tenant, h = await api.tenant(f"Bill {region}", region=region)
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["echo"])
        for i in range(3):
            started.append((h, await api.start(h, agent, scripted(
                call("echo", text="x" * (40 * i)), answer("z" * 800), text=f"{region}-{i}"))))
    async with running_worker(database_dsn, None):
        for h, run_id in started:
            events = await api.events_until_end(h, run_id, within=60)
            assert events[-1]["type"] == "RunFinished", events[-1]
