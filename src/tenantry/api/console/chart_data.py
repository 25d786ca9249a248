"""What the charts page plots, read from the ledger and the database, for one tenant or for
every tenant grouped by tenant class (its plan).

Per tenant, everything is read in that tenant's own transaction (row-level security, as for
the run page); the day's usage is the very function behind ``GET /v1/usage``, so the spend
chart shows the API's own figures. All tenants: the first ``CHART_TENANTS`` tenants from the
console's tenants function, one transaction each — no cross-tenant function serves
per-minute figures (that would need a migration), and the page says when it stopped short.
Model call errors and sandbox pools are known only to the worker loops in this process."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from tenantry.api.console import reads, workers
from tenantry.api.console.svg import Chart, Series
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import TenantId
from tenantry.ledger import usage
from tenantry.runs.inprocess import LocalWorkers
from tenantry.scheduler import policy
from tenantry.telemetry.worker import WorkerMetrics

Q = load(__package__, "chart_data.sql")

MINUTES = 60
CHART_TENANTS = 200  # one page of the console's tenants function
RUNS_PER_TENANT = 20_000  # rows read per tenant for the last hour's runs
CALLS_WINDOW = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class RunTimes:
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


@dataclass(slots=True)
class TenantFigures:
    """One tenant's part of the charts."""

    tenant: TenantId
    plan: str
    running: int
    max_running: int
    not_ended: int
    max_queued: int
    spend_cap_micros: int | None
    runs: list[RunTimes] = field(default_factory=list)
    runs_cut: bool = False  # more runs in the hour than RUNS_PER_TENANT
    calls: dict[str, int] = field(default_factory=dict)  # account → answered calls
    days: dict[str, dict[str, int]] = field(default_factory=dict)  # YYYY-MM-DD → sums


@dataclass(frozen=True, slots=True)
class Window:
    now: datetime
    minutes: tuple[datetime, ...]  # the last hour's minutes, the current one last
    month_days: tuple[date, ...]  # the 1st of this month to today (UTC)

    @classmethod
    def at(cls, now: datetime) -> Window:
        minute = now.astimezone(UTC).replace(second=0, microsecond=0)
        minutes = tuple(minute - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES))
        today = minute.date()
        days = tuple(today.replace(day=d) for d in range(1, today.day + 1))
        return cls(now, minutes, days)

    @property
    def since(self) -> datetime:
        return self.minutes[0]

    @property
    def month_start(self) -> datetime:
        first = self.month_days[0]
        return datetime(first.year, first.month, first.day, tzinfo=UTC)

    @property
    def month_end(self) -> datetime:  # the end of today, as GET /v1/usage's window
        last = self.month_days[-1]
        return datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)

    def minute_labels(self) -> tuple[str, ...]:
        return tuple(m.strftime("%H:%M") for m in self.minutes)

    def day_labels(self) -> tuple[str, ...]:
        return tuple(d.isoformat() for d in self.month_days)


async def read_tenant(db: Database, f: TenantFigures, w: Window) -> TenantFigures:
    async with db.tenant_tx(f.tenant) as conn:
        rows = await conn.fetch(Q.runs_last_hour, f.tenant.value, w.since, RUNS_PER_TENANT + 1)
        calls = await conn.fetch(Q.calls_by_account, f.tenant.value, w.now - CALLS_WINDOW)
    f.runs_cut = len(rows) > RUNS_PER_TENANT
    f.runs = [RunTimes(r["created_at"], r["started_at"], r["ended_at"])
              for r in rows[:RUNS_PER_TENANT]]
    f.calls = {r["account"]: int(r["calls"]) for r in calls}
    _, groups = await usage.for_tenant(db, f.tenant, w.month_start, w.month_end, "day")
    f.days = {g["key"]: g for g in groups}
    return f


async def one_tenant(db: Database, tenant: TenantId, w: Window) -> TenantFigures | None:
    """``tenant``'s figures; None when there is no such tenant."""
    try:
        state = await policy.get_policy(db, tenant)
    except NotFound:
        return None
    load_ = state.load
    f = TenantFigures(tenant, state.plan, load_.running, state.policy.max_running,
                      load_.queued + load_.running + load_.waiting, state.policy.max_queued,
                      state.policy.monthly_spend_cap_micros)
    return await read_tenant(db, f, w)


async def all_tenants(db: Database, console_db: Database,
                      w: Window) -> tuple[list[TenantFigures], bool]:
    """The first CHART_TENANTS tenants' figures, and whether there are more tenants."""
    rows, _ = await reads.tenants_page(console_db, after=None, limit=CHART_TENANTS + 1)
    found = []
    for t in rows[:CHART_TENANTS]:
        f = TenantFigures(t.tenant, t.plan, t.load.running, t.policy.max_running,
                          t.load.queued + t.load.running + t.load.waiting, t.policy.max_queued,
                          t.policy.monthly_spend_cap_micros)
        found.append(await read_tenant(db, f, w))
    return found, len(rows) > CHART_TENANTS


# -- from figures to charts --------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks: Postgres's percentile_cont."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    at = (len(ordered) - 1) * fraction
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _groups(figures: list[TenantFigures], single: bool) -> dict[str, list[TenantFigures]]:
    grouped: dict[str, list[TenantFigures]] = defaultdict(list)
    for f in figures:
        grouped["" if single else f.plan].append(f)
    return dict(sorted(grouped.items()))


def _name(what: str, group: str) -> str:
    return f"{what} · {group}" if group else what


def _minute(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def runs_chart(figures: list[TenantFigures], w: Window, single: bool) -> Chart:
    series = []
    index = {m: i for i, m in enumerate(w.minutes)}
    for group, members in _groups(figures, single).items():
        started = [0.0] * MINUTES
        ended = [0.0] * MINUTES
        for f in members:
            for r in f.runs:
                if r.started_at is not None and (i := index.get(_minute(r.started_at))) is not None:
                    started[i] += 1
                if r.ended_at is not None and (i := index.get(_minute(r.ended_at))) is not None:
                    ended[i] += 1
        series += [Series(_name("started", group), tuple(started)),
                   Series(_name("finished", group), tuple(ended))]
    return Chart("chart-runs", "Runs started and finished per minute, last hour",
                 w.minute_labels(), tuple(series),
                 note="Agent runs; started is the first claim, finished any end "
                      "(finished, failed or cancelled).")


def wait_chart(figures: list[TenantFigures], w: Window, single: bool) -> Chart:
    series = []
    index = {m: i for i, m in enumerate(w.minutes)}
    for group, members in _groups(figures, single).items():
        waits: list[list[float]] = [[] for _ in range(MINUTES)]
        for f in members:
            for r in f.runs:
                if r.started_at is None:
                    continue
                i = index.get(_minute(r.started_at))
                if i is not None:
                    waited = (r.started_at - r.created_at).total_seconds() * 1000
                    waits[i].append(max(waited, 0.0))
        for label, q in (("p50", 0.5), ("p95", 0.95)):
            series.append(Series(_name(label, group), tuple(
                percentile(m, q) if m else None for m in waits)))
    return Chart("chart-wait", "Queue wait per minute (p50, p95), last hour",
                 w.minute_labels(), tuple(series), unit="ms",
                 note="From a run's creation to its first claim, by the minute it was "
                      "claimed; a minute with no claim has no point.")


def slots_chart(figures: list[TenantFigures], single: bool) -> Chart:
    if single:
        f = figures[0]
        return Chart("chart-slots", "Slots used against caps", ("running", "not ended"),
                     (Series("used", (float(f.running), float(f.not_ended))),
                      Series("cap", (float(f.max_running), float(f.max_queued)))), kind="bar",
                     note="Running against max_running; queued, running and waiting "
                          "against max_queued.")
    groups = _groups(figures, single)
    return Chart("chart-slots", "Running runs against max_running, by tenant class",
                 tuple(groups), (
                     Series("running", tuple(float(sum(f.running for f in m))
                                             for m in groups.values())),
                     Series("max_running", tuple(float(sum(f.max_running for f in m))
                                                 for m in groups.values()))), kind="bar",
                 note="Summed over the class's tenants: each tenant's own cap holds on its "
                      "own (pick a tenant for its figures).")


def _spend(day: dict[str, int] | None) -> int:
    return 0 if day is None else int(day["cost_micros"]) + int(day["sandbox_cost_micros"])


def spend_chart(figures: list[TenantFigures], w: Window, single: bool) -> Chart:
    series = []
    for group, members in _groups(figures, single).items():
        total, points = 0, []
        for day in w.day_labels():
            total += sum(_spend(f.days.get(day)) for f in members)
            points.append(float(total))
        series.append(Series(_name("spend to date", group), tuple(points)))
    cap = figures[0].spend_cap_micros if single and figures else None
    empty = not any(f.days for f in figures)
    return Chart("chart-spend", "Spend this month, to date, against the monthly cap",
                 w.day_labels(), () if empty else tuple(series), unit="usd_micros",
                 limit=None if cap is None else float(cap), limit_label="monthly cap",
                 note=("Model calls and sandbox time from the usage facts, as GET /v1/usage "
                       "sums them (reservations of calls in flight are not in it). ")
                 + ("" if single and cap is not None else
                    "No monthly cap." if single else
                    "Caps are per tenant: pick a tenant to see its cap."))


def tokens_chart(figures: list[TenantFigures], w: Window, single: bool) -> Chart:
    series = []
    for group, members in _groups(figures, single).items():
        for what in ("input_tokens", "output_tokens"):
            series.append(Series(_name(what.replace("_", " "), group), tuple(
                float(sum(int((f.days.get(day) or {}).get(what, 0)) for f in members))
                for day in w.day_labels())))
    empty = not any(f.days for f in figures)
    return Chart("chart-tokens", "Tokens per day, this month", w.day_labels(),
                 () if empty else tuple(series), kind="bar",
                 note="Input includes cached input. Tokens have a per-minute budget, not a "
                      "monthly cap.")


def calls_chart(figures: list[TenantFigures], single: bool) -> Chart:
    accounts = sorted({a for f in figures for a in f.calls})
    series = [Series(_name("calls", group), tuple(
        float(sum(f.calls.get(a, 0) for f in members)) for a in accounts))
        for group, members in _groups(figures, single).items()]
    return Chart("chart-calls", "Model calls per account, last 24 hours", tuple(accounts),
                 tuple(series) if accounts else (), kind="bar",
                 note="Calls that answered, one usage fact each.")


def errors_chart(local: LocalWorkers | None, single: bool) -> Chart:
    """Calls that did not answer, per account, from this process's worker counters (since
    they started): the ledger records only calls that answered."""
    title = "Model call errors per account, since this process's workers started"
    if single:
        return Chart("chart-errors", title, (), (),
                     note="Errors are counted per tenant class, never per tenant: see all "
                          "tenants.")
    metrics: dict[int, WorkerMetrics] = {}
    for engine in (local.engines if local else []):
        metrics[id(engine.metrics)] = engine.metrics
    counted: dict[tuple[str, str], float] = defaultdict(float)
    for m in metrics.values():
        for (_class, _provider, account, outcome), value in m.model_calls.series().items():
            counted[(account, "errors" if outcome != "ok" else "answered")] += value
    accounts = sorted({a for a, _ in counted})
    if not metrics:
        note = "Workers run in other processes: their counters are on their /metrics."
    else:
        note = "Attempts on each account (each rung of the failure ladder) and those that " \
               "did not answer: rate limited, refused, unusable or an error."
    return Chart("chart-errors", title, tuple(accounts), tuple(
        Series(kind, tuple(counted.get((a, kind), 0.0) for a in accounts))
        for kind in ("answered", "errors")) if accounts else (), kind="bar", note=note)


def sandbox_chart(local: LocalWorkers | None) -> Chart:
    views = [v for v in workers.sandboxes(local) or [] if v.backend is not None]
    labels = tuple(v.worker for v in views)
    series = (Series("live sandboxes", tuple(float(v.live) for v in views)),
              Series("warm ready", tuple(None if v.pool_ready is None else float(v.pool_ready)
                                         for v in views)),
              Series("warm pool size", tuple(None if v.pool_size is None else float(v.pool_size)
                                             for v in views)))
    shown = workers.sandboxes(local)
    note = ("Workers run in other processes: each owns its own pool." if shown is None else
            "Per worker in this process, as the Sandboxes page shows." if views else
            "No sandbox backend in this process's workers: built-in code tools are "
            "unavailable.")
    return Chart("chart-sandboxes", "Sandbox pool occupancy", labels,
                 series if views else (), kind="bar", note=note)


def charts(figures: list[TenantFigures], w: Window, local: LocalWorkers | None,
           single: bool) -> list[Chart]:
    return [runs_chart(figures, w, single), wait_chart(figures, w, single),
            slots_chart(figures, single) if figures else Chart(
                "chart-slots", "Slots used against caps", (), ()),
            spend_chart(figures, w, single), tokens_chart(figures, w, single),
            calls_chart(figures, single), errors_chart(local, single), sandbox_chart(local)]
