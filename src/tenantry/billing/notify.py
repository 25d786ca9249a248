"""The operator's webhook (``TENANTRY_OPERATOR_WEBHOOK_URL``): a JSON POST per flagged or
late reconciliation day, from an outbox (``operator_notifications``, migration 0058).

A notification is queued in the transaction that records its day, once per (account, day,
kind) — the primary key — so a restart or a second job instance never queues it twice.
Delivery is at-least-once: a crash after the receiver answered and before the answer is
recorded sends it again, with the same ``Idempotency-Key`` (``<kind>:<account>:<day>``)
for the receiver to drop. Signed like tenants' webhooks (``Tenantry-Signature``, see
:func:`tenantry.runs.webhooks.sign`) when the operator sets a secret.

The URL is the operator's own (validated at start-up, and possibly on a private network),
so unlike a tenant's webhook it is not held to the egress address policy."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx2

from tenantry.backoff import backoff
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.jsonutil import dumps
from tenantry.runs.webhooks import SIGNATURE_HEADER, sign

logger = logging.getLogger(__name__)
Q = load(__package__)

FLAGGED = "billing.reconciliation.flagged"
LATE = "billing.reconciliation.late"


@dataclass(frozen=True, slots=True)
class NotifySettings:
    #: Tries per notification before it is given up (and logged).
    attempts: int = 5
    #: The wait before the first retry, doubling up to the cap (tenantry.backoff).
    retry_first_seconds: float = 60.0
    retry_cap_seconds: float = 3600.0
    #: One attempt, all of it (connect, send, read).
    timeout_seconds: float = 15.0
    #: Notifications sent per pass at most.
    batch: int = 50


@dataclass(slots=True)
class OperatorWebhook:
    db: Database
    url: str
    secret: str | None = field(default=None, repr=False)
    settings: NotifySettings = field(default_factory=NotifySettings)
    client: httpx2.AsyncClient | None = None

    async def deliver_due(self, now: datetime) -> int:
        """Send the notifications due at ``now``; how many were delivered."""
        async with self.db.unscoped() as conn:
            rows = await conn.fetch(Q.due_notifications, now, self.settings.batch)
        delivered = 0
        for row in rows:
            error = await self._post(row["kind"], row["account"], row["day"].isoformat(),
                                     row["body"])
            tries = row["attempts"] + 1
            retry: datetime | None = None
            if error is not None and tries < self.settings.attempts:
                retry = now + timedelta(seconds=backoff(
                    tries, first=self.settings.retry_first_seconds,
                    cap=self.settings.retry_cap_seconds))
            elif error is not None:
                logger.error("operator webhook given up", extra={
                    "kind": row["kind"], "account": row["account"], "error": error})
            async with self.db.unscoped() as conn:
                await conn.execute(Q.notification_tried, row["account"], row["day"],
                                   row["kind"], retry, now if error is None else None, error)
            delivered += error is None
        return delivered

    async def _post(self, kind: str, account: str, day: str, body: dict[str, Any],
                    ) -> str | None:
        """None when the receiver took it (2xx); else why not, for the outbox's row."""
        payload = dumps(body)
        headers = {"Content-Type": "application/json",
                   "Idempotency-Key": f"{kind}:{account}:{day}"}
        if self.secret:
            headers[SIGNATURE_HEADER] = sign(self.secret, int(time.time()), payload)
        client = self.client or httpx2.AsyncClient(timeout=self.settings.timeout_seconds)
        try:
            response = await client.post(self.url, content=payload, headers=headers)
        except httpx2.HTTPError as exc:
            return f"request failed: {type(exc).__name__}"
        finally:
            if self.client is None:
                await client.aclose()
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"
