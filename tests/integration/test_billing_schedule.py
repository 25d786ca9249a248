"""The scheduled billing reconciliation: each reporting operator account's previous UTC day
against its provider's report (fake OpenAI and Anthropic servers over real HTTP), flagged
days told to the operator's webhook (a real local receiver), a job instance that stops
mid-way replaced by another without a day skipped or doubled, a late report retried and then
recorded late — and all of it on /metrics."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import asyncpg
import orjson

from tenantry.billing.schedule import (
    Export,
    PassOutcome,
    ReconcileSettings,
    ReportingAccount,
    ScheduledReconciliation,
)
from tenantry.bootstrap.billing import scheduled_reconciliation
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.ledger import reconcile
from tenantry.ledger.provider_fetch import ProviderReportUnavailable
from tenantry.ledger.provider_reports import OpenAIExport, ProviderUsage
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api, free_port
from tests.support.billing import ADMIN_KEY, run_traffic
from tests.support.receiver import Receiver
from tests.support.worker import Fakes

SECRET = "operator-hook-secret"
JOB = ReconcileSettings(hour=6, lookback_days=7, lease_seconds=900, poll_seconds=60)
RATIO = "tenantry_billing_reconciliation_difference_ratio"
LATE = "tenantry_billing_reconciliation_late_reports"
LAST_DAY = "tenantry_billing_reconciliation_last_day_timestamp_seconds"


def _at(day: date, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=UTC)


def _job(db: Database, receiver: Receiver, keys: str) -> ScheduledReconciliation:
    settings = Settings.from_env({"TENANTRY_RECONCILE_ADMIN_KEYS": keys,
                                  "TENANTRY_OPERATOR_WEBHOOK_URL": receiver.url,
                                  "TENANTRY_OPERATOR_WEBHOOK_SECRET": SECRET})
    return scheduled_reconciliation(settings, db, JOB)


async def _move_today_to(day: date, admin_conn: asyncpg.Connection,
                         servers: tuple[FakeModelServer, ...]) -> None:
    """Today's usage, on both sides, becomes ``day``'s (noon UTC): usage facts are
    append-only, so the superuser moves them with the immutability trigger off."""
    today = _at(datetime.now(UTC).date(), 0)
    noon = _at(day, 12)
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL session_replication_role = replica")
        await admin_conn.execute("UPDATE usage_facts SET created_at = $1 WHERE created_at >= $2",
                                 noon, today)
    for server in servers:
        server.usage_log[:] = [
            dataclasses.replace(r, created_at=noon.timestamp())
            if r.created_at >= today.timestamp() else r for r in server.usage_log]


async def _gauges(api: Api) -> dict[tuple[str, str], float]:
    r = await api.client.get("/metrics", headers=api.operator)
    assert r.status_code == 200, r.text
    found = {}
    for line in r.text.splitlines():
        if line.startswith("tenantry_billing_reconciliation_"):
            name, _, value = line.partition(" ")
            metric, _, label = name.partition('{account="')
            found[metric, label.rstrip('"}')] = float(value)
    return found


def _days(outcome: PassOutcome) -> list[tuple[str, date, str, bool]]:
    return sorted((d.account, d.day, d.status, d.flagged) for d in outcome.days)


async def test_a_daily_job_flags_the_one_day_off_by_three_percent_once_across_a_restart(
    api: Api, fakes: Fakes, providers: tuple[FakeModelServer, FakeModelServer],
    database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    openai, anthropic = providers
    await api.model_account("bill-oa", openai.base_url, region="us")
    await api.model_account("bill-an", anthropic.base_url, provider="anthropic", region="eu")
    today = datetime.now(UTC).date()
    day1, day2 = today - timedelta(days=3), today - timedelta(days=2)
    for day in (day1, day2):  # two days of usage for each account, on both sides
        await run_traffic(api, fakes, database_dsn)
        await _move_today_to(day, admin_conn, providers)
    # OpenAI bills bill-oa 3% more output on day 2 than the platform recorded.
    on_day2 = [i for i, r in enumerate(openai.usage_log) if r.created_at == _at(day2, 12)
               .timestamp()]
    output = sum(openai.usage_log[i].completion_tokens for i in on_day2)
    first = openai.usage_log[on_day2[0]]
    openai.usage_log[on_day2[0]] = dataclasses.replace(
        first, completion_tokens=first.completion_tokens + round(output * 0.03))

    receiver = Receiver()
    await receiver.server.start()
    try:
        keys = f"bill-oa={ADMIN_KEY},bill-an={ADMIN_KEY}"
        first_job, second_job = _job(db, receiver, keys), _job(db, receiver, keys)

        # Day 1 is reconciled at 07:00 the next morning: both accounts match.
        one = await first_job.run_once(now=_at(day2, 7))
        assert _days(one) == [("bill-an", day1, "done", False), ("bill-oa", day1, "done", False)]
        # The first instance now stops answering without giving its lease back: a second
        # one finds the lease held and does nothing until it expires.
        assert (await second_job.run_once(now=_at(day2, 7) + timedelta(minutes=5))).leader \
            is False
        # A day later the lease is long expired: the second instance takes it, takes up
        # after day 1 (not redoing it) and flags day 2 of bill-oa only.
        two = await second_job.run_once(now=_at(day2 + timedelta(days=1), 7))
        assert two.leader and not two.lease_lost
        assert _days(two) == [("bill-an", day2, "done", False), ("bill-oa", day2, "done", True)]
        assert two.notified == 1
        flagged = next(d for d in two.days if d.flagged)
        assert flagged.difference is not None and 0.025 < flagged.difference < 0.035
        # The first instance, back within the second's lease, finds the lease another's;
        # once it is its own again, nothing is due twice.
        assert (await first_job.run_once(
            now=_at(day2 + timedelta(days=1), 7) + timedelta(minutes=5))).leader is False
        again = await second_job.run_once(now=_at(day2 + timedelta(days=1), 9))
        assert again.days == [] and again.notified == 0
    finally:
        await receiver.server.stop()

    # Exactly one stored reconciliation per account and day; the one flagged is bill-oa's
    # day 2, off in its output tokens (and hence its cost) alone.
    stored = await admin_conn.fetch(
        "SELECT account, scheduled_day, flagged_days, days FROM billing_reconciliations "
        "ORDER BY account, scheduled_day")
    assert [(r["account"], r["scheduled_day"], r["flagged_days"]) for r in stored] == [
        ("bill-an", day1, 0), ("bill-an", day2, 0), ("bill-oa", day1, 0), ("bill-oa", day2, 1)]
    [day_row] = orjson.loads(stored[3]["days"])
    off = {f["name"] for f in day_row["figures"] if f["flagged"]}
    assert "output_tokens" in off and off <= {"output_tokens", "cost_micros"}
    ratio = max(abs(f["relative_diff"]) for f in day_row["figures"])
    assert ratio == flagged.difference
    # Recording a scheduled day again (as an instance that crashed before its commit
    # would) stores nothing.
    async with db.unscoped() as conn:
        assert await reconcile.store(
            conn, account="bill-oa", provider="openai", first=day2, last=day2,
            theirs=ProviderUsage({}, frozenset()), source="fetch", rows=(),
            scheduled=True) is None

    # One notification, to the operator's receiver, signed with the operator's secret.
    [(headers, body)] = receiver.received
    sent: dict[str, Any] = orjson.loads(body)
    assert (sent["kind"], sent["account"], sent["day"]) == (
        "billing.reconciliation.flagged", "bill-oa", day2.isoformat())
    assert sent["difference"] == ratio
    assert headers["idempotency-key"] == f"billing.reconciliation.flagged:bill-oa:{day2}"
    t, _, v1 = headers["tenantry-signature"].partition(",")
    expected = hmac.new(SECRET.encode(), f"{t[2:]}.".encode() + body, hashlib.sha256)
    assert v1 == f"v1={expected.hexdigest()}"

    # The metrics show the ratio of each account's most recent reconciled day.
    gauges = await _gauges(api)
    assert gauges[RATIO, "bill-oa"] == ratio
    assert gauges[RATIO, "bill-an"] == 0
    assert gauges[LATE, "bill-oa"] == gauges[LATE, "bill-an"] == 0
    assert gauges[LAST_DAY, "bill-oa"] == _at(day2, 0).timestamp()


async def test_a_report_that_does_not_come_is_retried_then_recorded_late(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    # The provider's report endpoint does not answer at all.
    await api.model_account("bill-down", f"http://127.0.0.1:{free_port()}/v1")
    receiver = Receiver()
    await receiver.server.start()
    try:
        job = _job(db, receiver, f"bill-down={ADMIN_KEY}")
        day = datetime.now(UTC).date() - timedelta(days=5)
        morning = _at(day + timedelta(days=1), 7)

        first = await job.run_once(now=morning)
        [waiting] = first.days
        assert (waiting.day, waiting.status) == (day, "pending")
        assert waiting.error is not None and "provider_report_unavailable" in waiting.error
        # Not asked again before its backoff ...
        assert (await job.run_once(now=morning + timedelta(minutes=1))).days == []
        # ... and asked again after it.
        second = await job.run_once(now=morning + timedelta(hours=1))
        assert [(d.day, d.status) for d in second.days] == [(day, "pending")]
        # 48 hours after the day ended it is recorded late, and the operator told once;
        # the day since (due from 06:00 the day after it) is caught up on, and waits for
        # its own report.
        deadline = _at(day + timedelta(days=1), 0) + timedelta(hours=48)
        last = await job.run_once(now=deadline)
        assert sorted((d.day, d.status) for d in last.days) == [
            (day, "late"), (day + timedelta(days=1), "pending")]
        assert last.notified == 1
        assert (await job.run_once(now=deadline + timedelta(hours=5))).notified == 0
    finally:
        await receiver.server.stop()

    row = await admin_conn.fetchrow("SELECT status, attempts FROM billing_reconcile_days "
                                    "WHERE account = 'bill-down' AND day = $1", day)
    assert (row["status"], row["attempts"]) == ("late", 3)
    assert await admin_conn.fetchval("SELECT count(*) FROM billing_reconciliations") == 0
    [(_, body)] = receiver.received
    sent = orjson.loads(body)
    assert (sent["kind"], sent["account"], sent["day"], sent["attempts"]) == (
        "billing.reconciliation.late", "bill-down", day.isoformat(), 3)
    gauges = await _gauges(api)
    assert gauges[LATE, "bill-down"] == 1
    assert (RATIO, "bill-down") not in gauges


async def test_an_instance_whose_lease_is_taken_mid_pass_records_nothing(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    async def accounts_then_taken_over() -> list[ReportingAccount]:
        # While this instance fetches, another takes the lease (as after a long pause).
        await admin_conn.execute("UPDATE billing_reconcile_lease "
                                 "SET owner = 'another', epoch = epoch + 1")
        return [ReportingAccount("bill-oa", "openai", "http://127.0.0.1:1/v1", ADMIN_KEY)]

    async def no_report(account: ReportingAccount, day: date, costs: bool) -> Export:
        raise ProviderReportUnavailable("down")

    job = ScheduledReconciliation(db, accounts_then_taken_over, no_report, JOB)
    outcome = await job.run_once(now=_at(datetime.now(UTC).date(), 7))
    assert outcome.leader and outcome.lease_lost and outcome.days == []
    assert await admin_conn.fetchval("SELECT count(*) FROM billing_reconcile_days") == 0


async def test_a_report_that_does_not_reach_the_day_yet_is_waited_on(db: Database) -> None:
    async def one_account() -> list[ReportingAccount]:
        return [ReportingAccount("bill-oa", "openai", "http://127.0.0.1:1/v1", ADMIN_KEY)]

    async def no_buckets_yet(account: ReportingAccount, day: date, costs: bool) -> Export:
        return OpenAIExport.model_validate({"format": "openai", "usage": [
            {"object": "page", "has_more": False, "data": []}]})

    job = ScheduledReconciliation(db, one_account, no_buckets_yet, JOB)
    [waiting] = (await job.run_once(now=_at(datetime.now(UTC).date(), 7))).days
    assert waiting.status == "pending"
    assert waiting.error == "the provider's report does not reach this day yet"
