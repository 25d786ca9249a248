"""/metrics after real runs: runs by status from the database, and what the worker
loops of the same process counted — queue waits, step platform time, model calls and
errors, breakers, budget refusals — all by tenant class; no label value is a tenant id."""

from __future__ import annotations

from tenantry.runs.inprocess import LocalWorkers
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import Api, serving_api
from tests.support.prometheus import samples, value
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker


async def _tenant(api: Api, name: str, plan: str) -> tuple[str, dict[str, str]]:
    r = await api.client.post("/admin/v1/tenants", json={"name": name, "plan": plan},
                              headers=api.operator)
    tenant = r.json()["tenant_id"]
    key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                 headers=api.operator)).json()["api_key"]
    return tenant, {"Authorization": f"Bearer {key}"}


async def test_metrics_count_runs_calls_and_refusals_by_tenant_class(
    database_dsn: str, fakes: Fakes,
) -> None:
    local = LocalWorkers()
    metrics = WorkerMetrics()
    async with serving_api(database_dsn, local=local) as api, running_worker(
        database_dsn, fakes.model.base_url, metrics=metrics,
    ) as worker:
        local.engines.append(worker.engine)
        gold, gh = await _tenant(api, "Gold", "gold")
        gold2, g2h = await _tenant(api, "Gold Two", "gold")
        free, fh = await _tenant(api, "Free", "free")
        for tenant in (gold, gold2, free):
            await api.tool_server(tenant, fakes.mcp.url)
        gold_agent = await api.agent(gh, tools=["echo"])
        gold_limited = await api.agent(g2h, tools=["echo"], limits={"max_steps": 1})
        free_agent = await api.agent(fh)

        finished = [await api.start(gh, gold_agent, scripted(answer(f"ok {i}"), text=str(i)))
                    for i in range(2)]
        finished.append(await api.start(fh, free_agent, scripted(answer("free"))))
        for run in finished:
            await api.events_until_end(gh if run != finished[-1] else fh, run)
        # A provider refusal fails a run (not ours); an agent limit refuses a model call.
        fakes.model.fail_next(1, status=400)
        refused = await api.start(gh, gold_agent, scripted(answer("never"), text="400"))
        assert (await api.events_until_end(gh, refused))[-1]["type"] == "RunFailed"
        stopped = await api.start(g2h, gold_limited, scripted(call("echo", text="x"),
                                                              answer("never")))
        assert (await api.events_until_end(g2h, stopped))[-1]["type"] == "BudgetStopped"
        r = await api.client.get("/metrics", headers=api.operator)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
        assert (await api.client.get("/metrics")).status_code == 401
    found = samples(text)

    # Runs by status, from the database.
    assert value(found, "tenantry_runs", tenant_class="gold", status="finished") == 2
    assert value(found, "tenantry_runs", tenant_class="gold", status="failed") == 2
    assert value(found, "tenantry_runs", tenant_class="free", status="finished") == 1
    assert value(found, "tenantry_runs", tenant_class="free", status="failed") == 0
    assert value(found, "tenantry_runs", tenant_class="gold", status="running") == 0
    assert value(found, "tenantry_leases_active", tenant_class="gold") == 0
    # What the worker counted.
    assert value(found, "tenantry_worker_runs_ended_total", tenant_class="gold",
                 status="finished") == 2
    assert value(found, "tenantry_worker_runs_ended_total", tenant_class="gold",
                 status="failed") == 2
    assert value(found, "tenantry_budget_refusals_total", tenant_class="gold",
                 limit="max_steps") == 1
    assert value(found, "tenantry_queue_wait_seconds_count", tenant_class="gold") == 4
    assert value(found, "tenantry_queue_wait_seconds_count", tenant_class="free") == 1
    assert value(found, "tenantry_queue_wait_seconds_bucket", tenant_class="gold",
                 le="+Inf") == 4
    # Steps: gold's two answers, the refused call, the limited run's call, tool, stop.
    assert value(found, "tenantry_step_platform_seconds_count", tenant_class="gold") >= 5
    assert value(found, "tenantry_model_calls_total", tenant_class="gold", provider="openai",
                 account="fake", outcome="ok") == 3
    assert value(found, "tenantry_model_calls_total", tenant_class="gold", provider="openai",
                 account="fake", outcome="refused") == 1
    assert value(found, "tenantry_model_errors_total", tenant_class="gold",
                 provider="openai", account="fake") == 1
    assert value(found, "tenantry_model_calls_total", tenant_class="free", provider="openai",
                 account="fake", outcome="ok") == 1
    assert value(found, "tenantry_model_account_breakers", account="fake",
                 state="closed") == 1
    assert value(found, "tenantry_model_account_breakers", account="fake", state="open") == 0

    # Bounded labels: no label value anywhere is a tenant id (or contains one).
    tenants = {gold, gold2, free}
    labels = {v for _, pairs in found for _, v in pairs}
    assert labels, "no labelled samples"
    assert not any(t in v for t in tenants for v in labels)
    assert not any(t in text for t in tenants)
    assert {v for (name, pairs) in found for k, v in pairs if k == "tenant_class"} <= {
        "gold", "free", "standard", "unknown"}
