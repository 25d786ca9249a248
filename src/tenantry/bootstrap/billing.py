"""Wiring the scheduled billing reconciliation (billing/schedule.py): which accounts it
reconciles (the enabled operator accounts of a provider with usage reports, each with its
admin key in TENANTRY_RECONCILE_ADMIN_KEYS), how their reports are fetched, and the
operator's webhook."""

from __future__ import annotations

from datetime import date

from tenantry.billing.notify import OperatorWebhook
from tenantry.billing.schedule import (
    Export,
    ReconcileSettings,
    ReportingAccount,
    ScheduledReconciliation,
)
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.ledger import provider_fetch
from tenantry.models import accounts

#: The providers whose admin endpoints serve usage reports (ledger/provider_fetch.py).
REPORTING = ("openai", "anthropic")


def scheduled_reconciliation(settings: Settings, db: Database,
                             job: ReconcileSettings | None = None) -> ScheduledReconciliation:
    keys = settings.admin_keys

    async def reporting() -> list[ReportingAccount]:
        return [ReportingAccount(a.account_id, a.provider, a.base_url, keys[a.account_id])
                for a in await accounts.list_enabled(db)
                if a.tenant is None and a.provider in REPORTING and a.account_id in keys]

    async def fetch(account: ReportingAccount, day: date, costs: bool) -> Export:
        return await provider_fetch.fetch_export(account.provider, account.base_url,
                                                 account.admin_key, day, day, costs=costs)

    webhook = None if settings.operator_webhook_url is None else OperatorWebhook(
        db, settings.operator_webhook_url, settings.operator_webhook_secret)
    return ScheduledReconciliation(db, reporting, fetch, job or ReconcileSettings(),
                                   webhook)
