"""Sandbox seconds are priced (the operator's `sandbox` price) and count as spend: in the
run's cost and its max_cost_micros, in the tenant's month spend and its cap, and in the
usage reports. Billing does not depend on the backend, so one (bwrap) is enough here."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tenantry.sandbox.manager import SandboxManager
from tests.support.api import Api
from tests.support.cli import cli
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.parametrize("driver", ["bwrap"], indirect=True)

SUM_CODE = "print(sum(map(int, open('data/numbers.txt').read().split())))"


async def price_sandbox(api: Api, per_second_micros: int) -> str:
    r = await api.client.put("/admin/v1/prices/sandbox", headers=api.operator,
                             json={"per_second_micros": per_second_micros})
    assert r.status_code == 201, r.text
    version: str = r.json()["version"]
    return version


def of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == type_]


async def test_a_runs_sandbox_time_is_billed_at_the_sandbox_price(
    api: Api, fakes: Fakes, database_dsn: str, manager: SandboxManager,
    admin_conn: asyncpg.Connection,
) -> None:
    version = await price_sandbox(api, 1000)  # a micro-dollar per sandbox millisecond
    tenant, h = await api.tenant()
    agent = await api.agent(h, tools=["write_file", "run_python"])
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
        run_id = await api.start(h, agent, scripted(
            call("write_file", path="data/numbers.txt", content="3 4 5"),
            call("run_python", code=SUM_CODE),
            answer("{last_tool_result}")))
        events = await api.events_until_end(h, run_id, within=180)
    assert events[-1]["type"] == "RunFinished", events[-1]
    boxes = [c["sandbox"] for c in of(events, "ToolCompleted")]
    assert len(boxes) == 2
    for box in boxes:  # exec_ms times the price, rounded up to a whole micro-dollar
        assert box["cost_micros"] == -(-round(box["exec_ms"]) * 1000 // 1000)
        assert box["price_version"] == version
    sandbox_cost = sum(box["cost_micros"] for box in boxes)
    model_cost = sum(int(r["cost_micros"]) for r in of(events, "ModelReplied"))
    assert sandbox_cost > 0 and model_cost > 0
    assert (await api.run(h, run_id))["cost_micros"] == model_cost + sandbox_cost
    facts = await admin_conn.fetch(
        "SELECT sandbox_ms, cost_micros, price_version FROM sandbox_usage_facts ORDER BY seq")
    assert [(f["sandbox_ms"], f["cost_micros"], f["price_version"]) for f in facts] == [
        (round(box["exec_ms"]), box["cost_micros"], version) for box in boxes]

    usage = (await api.client.get("/v1/usage", params={"group_by": "agent"},
                                  headers=h)).json()
    assert usage["total"]["cost_micros"] == model_cost  # model calls
    assert usage["total"]["sandbox_cost_micros"] == sandbox_cost
    assert usage["groups"][0]["sandbox_cost_micros"] == sandbox_cost
    everyone = (await api.client.get("/admin/v1/usage", headers=api.operator)).json()
    assert [(row["tenant_id"], row["sandbox_cost_micros"]) for row in everyone] == [
        (tenant, sandbox_cost)]
    policy = (await api.client.get(f"/admin/v1/tenants/{tenant}/policy",
                                   headers=api.operator)).json()
    assert policy["load"]["month_spend_micros"] == model_cost + sandbox_cost
    trace = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    assert trace["totals"]["sandbox_cost_micros"] == sandbox_cost
    assert trace["totals"]["cost_micros"] == model_cost + sandbox_cost
    code, out, err = await cli("usage", env={"TENANTRY_URL": api.base_url,
                                             "TENANTRY_API_KEY": h["Authorization"][7:]})
    assert code == 0, err
    assert "sandbox $" in out
    # Without groups the one row is the tenant's total (the title names the tenant too).
    total = next(line for line in out.splitlines() if tenant in line and "→" not in line)
    assert f"{model_cost / 1e6:.4f}" in total and f"{sandbox_cost / 1e6:.4f}" in total


async def test_sandbox_spend_alone_reaches_the_spend_cap_and_the_runs_cost_limit(
    api: Api, fakes: Fakes, database_dsn: str, manager: SandboxManager,
) -> None:
    await price_sandbox(api, 10**9)  # $1 a sandbox millisecond: one execution is enough
    capped, h_capped = await api.tenant("Capped")
    r = await api.client.put(f"/admin/v1/tenants/{capped}/policy", headers=api.operator,
                             json={"monthly_spend_cap_micros": 1_000_000})
    assert r.status_code == 200, r.text
    _, h_limited = await api.tenant("Limited")
    script = scripted(call("run_python", code="print(1)"), call("run_python", code="print(2)"),
                      answer("never reached"))
    # The run's own cost limit far above the cap: only the tenant's cap can hold this one.
    under_cap = await api.agent(h_capped, tools=["run_python"],
                                limits={"max_cost_micros": 10**12})
    limited = await api.agent(h_limited, tools=["run_python"],
                              limits={"max_cost_micros": 1_000_000})
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
        run_capped = await api.start(h_capped, under_cap, script)

        async def capped_waits() -> bool:  # the tenant's cap: it waits (ADR 0035)
            run = await api.run(h_capped, run_capped)
            return run["waiting_reason"] == "monthly_spend_cap"
        await until(capped_waits, "the capped run waits for its tenant's cap", 180)
        capped_events = (await api.client.get(
            f"/v1/runs/{run_capped}/events",
            headers={**h_capped, "Accept": "application/json"})).json()["events"]
        run_limited = await api.start(h_limited, limited, script)
        limited_events = await api.events_until_end(h_limited, run_limited, within=180)

    assert capped_events[-1]["type"] == "RunParked", capped_events[-1]
    assert capped_events[-1]["data"]["reason"] == "monthly_spend_cap"
    assert limited_events[-1]["type"] == "BudgetStopped", limited_events[-1]  # its own limit
    assert limited_events[-1]["data"]["limit"] == "max_cost_micros"
    for events in (capped_events, limited_events):
        # One execution ran; the spend it cost held or stopped the run before the second.
        boxes = [c["sandbox"] for c in of(events, "ToolCompleted")]
        assert len(boxes) == 1 and boxes[0]["cost_micros"] >= 1_000_000
        model_cost = sum(int(r["cost_micros"]) for r in of(events, "ModelReplied"))
        assert model_cost < 1_000_000  # the model calls alone stayed well under
    usage = (await api.client.get("/v1/usage", headers=h_capped)).json()["total"]
    assert usage["cost_micros"] < 1_000_000 <= usage["sandbox_cost_micros"]
    policy = (await api.client.get(f"/admin/v1/tenants/{capped}/policy",
                                   headers=api.operator)).json()
    assert policy["load"]["month_spend_micros"] >= 1_000_000
