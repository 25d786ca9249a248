"""Webhooks: when a run ends, POST its summary to the run's URL, signed with the tenant's
secret, retried with backoff, and recorded in the run's log.

The delivery is an outbox on the run row, queued in the same transaction as the terminal
event, so a crash between the two cannot lose it. Delivery is at-least-once: receivers
dedupe by ``run_id`` (also sent as ``Idempotency-Key``)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx2

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.jsonutil import dumps
from tenantry.runs import log
from tenantry.runs.events import WebhookDelivered, WebhookFailed, WebhookOutcome

logger = logging.getLogger(__name__)
Q = load(__package__)

MAX_ATTEMPTS = 8
SIGNATURE_HEADER = "Tenantry-Signature"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (verify both, reject old t)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def backoff_seconds(attempts: int) -> float:
    return float(min(2 ** attempts, 3600))


class BlockedAddress(Exception):
    pass


async def check_destination(url: str, allow_private: bool) -> None:
    """Refuse to call internal, loopback, link-local (metadata) addresses unless allowed:
    the URL is the tenant's, the network it reaches is ours."""
    if allow_private:
        return
    host = urlsplit(url).hostname or ""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise BlockedAddress(f"{host} resolves to a non-public address ({address})")


class WebhookSender:
    def __init__(
        self, db: Database, *, allow_private: bool = False, timeout: float = 10.0,
        batch: int = 20,
    ) -> None:
        self._db = db
        self._allow_private = allow_private
        self._batch = batch
        self._client = httpx2.AsyncClient(timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def deliver_due(self) -> int:
        """Send every delivery that is due now; return how many were attempted."""
        async with self._db.unscoped() as conn:
            # Claimed for 60 s: another worker will not send it meanwhile.
            due = await conn.fetch(Q.claim_webhooks, self._batch, 60.0)
        await asyncio.gather(*(self._deliver(TenantId(r["tenant_id"]), RunId(r["run_id"]),
                                             r["attempts"]) for r in due))
        return len(due)

    async def _deliver(self, tenant: TenantId, run: RunId, attempts: int) -> None:
        async with self._db.tenant_tx(tenant) as conn:
            job = await conn.fetchrow(Q.webhook_job, tenant.value, run.uuid)
        if job is None:
            return
        body = dumps(_summary(run, job))
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(job["webhook_secret"], stamp, body),
            "Idempotency-Key": str(run),
            "User-Agent": "tenantry-webhooks",
        }
        url: str = job["webhook_url"]
        status_code: int | None = None
        error: str | None = None
        try:
            await check_destination(url, self._allow_private)
            response = await self._client.post(url, content=body, headers=headers)
            status_code = response.status_code
            delivered = 200 <= response.status_code < 300
        except (httpx2.HTTPError, OSError, BlockedAddress) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
            delivered = False
        if delivered:
            await self._finish(tenant, run, "delivered",
                               WebhookDelivered(url, attempts, status_code, error))
        elif attempts >= MAX_ATTEMPTS:
            await self._finish(tenant, run, "failed",
                               WebhookFailed(url, attempts, status_code, error))
        else:
            async with self._db.tenant_tx(tenant) as conn:
                await conn.execute(Q.webhook_retry_at, tenant.value, run.uuid,
                                   backoff_seconds(attempts))

    async def _finish(
        self, tenant: TenantId, run: RunId, state: str, outcome: WebhookOutcome
    ) -> None:
        async with self._db.tenant_tx(tenant) as conn:
            done = await conn.execute(Q.webhook_done, tenant.value, run.uuid, state)
            if done.endswith(" 1"):  # exactly one worker records the outcome
                await log.append(conn, tenant, run, outcome, epoch=None)


def _summary(run: RunId, job: Any) -> dict[str, Any]:
    return {
        "type": f"run.{job['status']}",
        "run_id": str(run),
        "agent_id": str(AgentId(job["agent_id"])),
        "version": job["agent_version"],
        "status": job["status"],
        "answer": job["answer"],
        "error": job["error"],
        "usage": {"input_tokens": job["input_tokens"], "output_tokens": job["output_tokens"]},
        "cost_micros": job["cost_micros"],
        "steps": job["steps"],
        "last_seq": job["last_seq"],
        "created_at": job["created_at"].isoformat(),
        "finished_at": job["finished_at"].isoformat() if job["finished_at"] else None,
    }
