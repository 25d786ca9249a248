"""The console's charts plot the platform's own figures: runs per minute as the runs table
counts them, queue waits as Postgres's percentile_cont computes them, spend and tokens per
day as GET /v1/usage sums them, slots as the tenant's policy and load say — for one
tenant, and for every tenant by tenant class."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from tenantry.api.console import epoch, session
from tenantry.ids import AgentId, TenantId
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.charts import SeedRun, plotted, seed_runs, seed_usage


def _cookie() -> dict[str, str]:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    return {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}


async def _tenant(api: Api, conn: asyncpg.Connection, name: str,
                  plan: str) -> tuple[TenantId, AgentId, dict[str, str]]:
    tenant, headers = await api.tenant(name)
    agent = AgentId.parse(await api.agent(headers))
    await conn.execute("UPDATE tenants SET plan = $2 WHERE tenant_id = $1", tenant, plan)
    return TenantId.parse(tenant), agent, headers


async def _seed(conn: asyncpg.Connection, tenant: TenantId, agent: AgentId, now: datetime,
                waits_ms: list[int], *, ago: int) -> None:
    """Runs claimed ``ago`` minutes ago after ``waits_ms``; half of them finished since."""
    claimed = now.replace(second=0, microsecond=0) - timedelta(minutes=ago, seconds=-5)
    runs = [SeedRun(claimed - timedelta(milliseconds=w), claimed,
                    claimed + timedelta(seconds=30) if i % 2 == 0 else None)
            for i, w in enumerate(waits_ms)]
    # Started and ended long before the hour: in neither chart.
    runs.append(SeedRun(now - timedelta(hours=3), now - timedelta(hours=3),
                        now - timedelta(hours=2)))
    await seed_runs(conn, tenant, agent, runs)


async def test_the_charts_plot_the_runs_table_and_the_usage_api(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    now = datetime.now(UTC)
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    a, agent_a, headers_a = await _tenant(api, admin_conn, "Alpha", "pro")
    b, agent_b, _ = await _tenant(api, admin_conn, "Beta", "free")
    await _seed(admin_conn, a, agent_a, now, [100, 200, 300, 1000], ago=10)
    await _seed(admin_conn, b, agent_b, now, [50, 70], ago=10)
    await admin_conn.execute("UPDATE tenant_policies SET max_running = 7, "
                             "monthly_spend_cap_micros = 90000 WHERE tenant_id = $1", a.value)
    facts = ((first + timedelta(hours=1), 12_000), (now - timedelta(minutes=1), 3_500),
             (now - timedelta(minutes=2), 500))
    for at, cost in facts:
        await seed_usage(admin_conn, a, agent_a, at=at, account="acct-one", input_tokens=1000,
                         output_tokens=40, cost_micros=cost)
    await seed_usage(admin_conn, b, agent_b, at=now - timedelta(minutes=1), account="acct-two",
                     input_tokens=10, output_tokens=1, cost_micros=7)

    page = await api.client.get("/console/charts", params={"tenant": a.value},
                                headers=_cookie())
    assert page.status_code == 200, page.text
    charts = plotted(page.text)
    assert set(charts) == {"chart-runs", "chart-wait", "chart-slots", "chart-spend",
                           "chart-tokens", "chart-calls", "chart-errors", "chart-sandboxes"}

    # Runs per minute: what the runs table says started and finished in each minute.
    counted = await admin_conn.fetch(
        """
        SELECT to_char(date_trunc('minute', t AT TIME ZONE 'UTC'), 'HH24:MI') AS minute,
               what, count(*) AS runs
        FROM (SELECT started_at AS t, 'started' AS what FROM runs
              WHERE tenant_id = $1 AND kind = 'agent' AND started_at >= $2
              UNION ALL
              SELECT finished_at, 'finished' FROM runs
              WHERE tenant_id = $1 AND kind = 'agent' AND finished_at >= $2) x
        GROUP BY 1, 2
        """, a.value, now.replace(second=0, microsecond=0) - timedelta(minutes=59))
    expected = {(r["minute"], r["what"]): float(r["runs"]) for r in counted}
    assert expected and sum(expected.values()) == 6  # 4 started, 2 finished
    shown = {k: v for k, v in charts["chart-runs"].items() if v}
    assert shown == expected

    # Queue waits: Postgres's own percentiles over the same runs.
    p50, p95 = await admin_conn.fetchrow(
        """
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY w),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY w)
        FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS w FROM runs
              WHERE tenant_id = $1 AND kind = 'agent' AND started_at >= $2) x
        """, a.value, now - timedelta(hours=1))
    waits = {k: v for k, v in charts["chart-wait"].items() if v is not None}
    assert len(waits) == 2  # one minute had claims: every other minute has no point
    assert {s: round(v, 3) for (_, s), v in waits.items()} == {"p50": round(p50, 3),
                                                                "p95": round(p95, 3)}

    # Slots: the tenant's load and policy (2 of its seeded runs still run).
    assert charts["chart-slots"][("running", "used")] == 2
    assert charts["chart-slots"][("running", "cap")] == 7

    # Spend and tokens per day: GET /v1/usage's own figures.
    usage = (await api.client.get("/v1/usage", params={"group_by": "day"},
                                  headers=headers_a)).json()
    spend = charts["chart-spend"]
    total = 0
    for day in usage["groups"]:
        total += day["cost_micros"] + day["sandbox_cost_micros"]
        assert spend[(day["key"], "spend to date")] == total
        assert charts["chart-tokens"][(day["key"], "input tokens")] == day["input_tokens"]
        assert charts["chart-tokens"][(day["key"], "output tokens")] == day["output_tokens"]
    today = now.date().isoformat()
    assert spend[(today, "spend to date")] == usage["total"]["cost_micros"] == 16_000
    assert 'class="limit" data-value="90000"' in page.text  # the monthly cap's line
    recent = sum(1 for at, _ in facts if at >= now - timedelta(hours=24))
    assert charts["chart-calls"] == {("acct-one", "calls"): recent}  # the last 24 h's
    # No worker in this process: no errors and no pools to chart, and the page says so.
    assert charts["chart-errors"] == {} and charts["chart-sandboxes"] == {}
    assert page.text.count('data-empty="true"') == 2

    # All tenants, by tenant class: each class's sums.
    every = plotted((await api.client.get("/console/charts", headers=_cookie())).text)
    runs = every["chart-runs"]
    assert sum(v or 0 for (_, s), v in runs.items() if s == "started · pro") == 4
    assert sum(v or 0 for (_, s), v in runs.items() if s == "started · free") == 2
    assert sum(v or 0 for (_, s), v in runs.items() if s == "finished · free") == 1
    assert every["chart-slots"][("pro", "running")] == 2
    assert every["chart-slots"][("free", "max_running")] == 100  # the default policy
    assert every["chart-spend"][(today, "spend to date · free")] == 7
    assert every["chart-calls"] == {("acct-one", "calls · free"): 0.0,
                                    ("acct-one", "calls · pro"): recent,
                                    ("acct-two", "calls · free"): 1.0,
                                    ("acct-two", "calls · pro"): 0.0}


async def test_a_bad_or_unknown_tenant_is_a_clear_4xx(api: Api) -> None:
    bad = await api.client.get("/console/charts", params={"tenant": "Not a tenant!"},
                               headers=_cookie())
    assert bad.status_code == 400 and "not a tenant id" in bad.text
    unknown = await api.client.get("/console/charts", params={"tenant": TenantId.new().value},
                                   headers=_cookie())
    assert unknown.status_code == 404
    empty = await api.client.get("/console/charts", headers=_cookie())
    assert empty.status_code == 200 and empty.text.count('data-empty="true"') == 8
    outside = await api.client.get("/console/charts")
    assert outside.status_code == 303 and "/console/login" in outside.headers["location"]
