"""The console shows "—" for a figure it has no data for, never a number that looks
measured: a sandbox pool with no claims has no last claim time (it said "0.0 ms"), a tenant
with no token bucket yet has no tokens left to show (it said "0 left"), a trace without a
total has none."""

from __future__ import annotations

from datetime import UTC, datetime

from tenantry.api.console import filters, reads, waterfall, workers
from tenantry.api.console.view import Console
from tenantry.ids import TenantId
from tenantry.sandbox.pool import PoolStats
from tenantry.scheduler.policy import TenantLoad, TenantPolicy


def _view(**changes: object) -> workers.SandboxView:
    values: dict[str, object] = {
        "worker": "w1", "backend": "bwrap", "live": 0, "hibernated": 0, "pool_size": 2,
        "pool_ready": 2, "claims": 0, "warm": 0, "cold": 0, "launched": 2,
        "launch_failures": 0, "claim_ms_last": None, **changes}
    return workers.SandboxView(**values)  # type: ignore[arg-type]


def test_figures_without_data_are_a_dash() -> None:
    assert filters.ms(None) == filters.num(None) == filters.usd(None) == "—"
    assert filters.ms(0.0) == "0.0 ms" and filters.num(0) == "0"  # a measured zero stays
    assert filters.num(12345.6, ",.0f") == "12,346"


def test_a_pool_that_never_handed_out_a_sandbox_has_no_last_claim() -> None:
    assert workers.last_claim_ms(PoolStats()) is None
    assert workers.last_claim_ms(PoolStats(claims=1, claim_ms_last=0.4)) == 0.4
    page = Console.load().templates.get_template("sandboxes.html")
    html = page.render(csrf="", path="/console/sandboxes", title="Sandboxes",
                       views=[_view()])
    row = html[html.index("<td><code>w1</code></td>"):]
    assert "0.0 ms" not in row and '<td class="num">—</td>' in row
    measured = page.render(csrf="", path="/console/sandboxes", title="Sandboxes",
                           views=[_view(claims=1, warm=1, claim_ms_last=3.25)])
    assert '<td class="num">3.2 ms</td>' in measured


def test_a_trace_total_it_does_not_have_is_not_zero() -> None:
    laid = waterfall.layout({"wall_ms": 10.0, "spans": [],
                             "totals": {"model_ms": 4.0, "tool_ms": 0.0}})
    totals = dict(laid.totals)
    assert totals["model provider"] == 4.0 and totals["tool"] == 0.0
    assert totals["parked"] is None and totals["model gateway"] is None


def test_a_tenant_without_a_token_bucket_yet_shows_no_tokens_left() -> None:
    def row(bucket: float | None) -> str:
        tenant = reads.TenantRow(
            tenant=TenantId.new(), name="Acme", plan="free", region="eu",
            policy=TenantPolicy(tokens_per_minute=10_000),
            load=TenantLoad(queued=0, running=0, waiting=0, month_spend_micros=0,
                            reserved_micros=0, bucket_tokens=bucket),
            pending_approvals=0, policy_updated_at=datetime.now(UTC))
        return Console.load().templates.get_template("tenants.html").render(
            csrf="", path="/console/tenants", title="Tenants", rows=[tenant], queue_depth=0,
            month="2026-12", more=None)

    assert "10,000 (— left)" in row(None)
    assert "10,000 (9,500 left)" in row(9500.0)
