"""Webhooks: when a run ends, POST its summary to the run's URL and to each of the tenant's
endpoints whose filters take it (ADR 0045), signed with the tenant's secret (and, during a
rotation's overlap, the one it replaced), retried with backoff, recorded in the run's log
(the run's own URL) and, attempt by attempt, in the tenant's delivery history (both).

The delivery is an outbox — on the run row for its own URL, a row per endpoint in
``endpoint_deliveries`` — queued in the same transaction as the terminal event, so a crash
between the two cannot lose it. Delivery is at-least-once: receivers dedupe by ``run_id``
(also sent as ``Idempotency-Key``).

The URL is the tenant's, the network it reaches is ours:

- the host is resolved once, every address is vetted with the egress proxy's address
  policy (``sandbox.egress.policy.address_refusal``), and the connection goes to the vetted
  literal address, with the Host header and TLS SNI/certificate check on the URL's name —
  a DNS answer that changes between the check and the connect (rebinding) reaches nothing;
- each delivery runs in its own task under one total deadline (resolve, connect, send,
  read), reads at most ``MAX_RESPONSE_BYTES`` of the answer, and deliveries at once are
  bounded per tenant and per worker: a slow receiver holds its own slot, never the
  worker's housekeeping or another tenant's deliveries;
- what the tenant sees of an attempt (the WebhookDelivered/WebhookFailed events) is a
  stable reason ("connect failed", "HTTP 503"); addresses, resolver and receiver text go
  to our log only."""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import hmac
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId, uuid7
from tenantry.jsonutil import dumps
from tenantry.runs import log
from tenantry.runs.events import WebhookDelivered, WebhookFailed, WebhookOutcome
from tenantry.sandbox.egress.policy import (
    Resolver,
    address_refusal,
    normalize_host,
    resolve,
)

logger = logging.getLogger(__name__)
Q = load(__package__)

MAX_ATTEMPTS = 8
SIGNATURE_HEADER = "Tenantry-Signature"
#: Of the receiver's answer only the status counts: read this much of the body, then close.
MAX_RESPONSE_BYTES = 4096

# The reasons a tenant sees (stable: documented in docs/reference/api.md).
REFUSED_NOT_PUBLIC = "destination refused: not a public address"
REFUSED_BAD_URL = "destination refused: not an http(s) URL with a host name"
NOT_RESOLVED = "destination did not resolve"
CONNECT_FAILED = "connect failed"
TIMED_OUT = "timed out"
SEND_FAILED = "request failed"
INTERRUPTED = "the last attempt was interrupted"


def sign(secret: str, timestamp: int, body: bytes, *, previous: str | None = None) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (verify both, reject old t).

    During a rotation's overlap, ``previous`` signs too, in a second ``v1`` after the new
    one (ADR 0045): a receiver checking every ``v1`` accepts either secret, and one that
    keeps the last ``v1`` of the header (the verification documented before rotations had
    an overlap) still holds the secret it was given, the previous one, until it switches."""
    values = [_mac(secret, timestamp, body)]
    if previous is not None and previous != secret:
        values.append(_mac(previous, timestamp, body))
    return ",".join([f"t={timestamp}", *(f"v1={v}" for v in values)])


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body,
                    hashlib.sha256).hexdigest()


def backoff_seconds(attempts: int) -> float:
    return float(min(2 ** attempts, 3600))


@dataclass(frozen=True, slots=True)
class WebhookLimits:
    """``deadline_seconds``: one attempt, all of it (resolve, connect, send, read);
    ``per_tenant``: one tenant's deliveries at once on a worker; ``total``: the worker's."""

    deadline_seconds: float = 15.0
    per_tenant: int = 4
    total: int = 32

    def __post_init__(self) -> None:
        if not (self.deadline_seconds > 0 and 0 < self.per_tenant <= self.total):
            raise ValueError("webhook limits: deadline > 0 and 0 < per_tenant <= total")

    @property
    def claim_seconds(self) -> float:
        # No other worker sends it while this attempt may still be running.
        return max(60.0, 2 * self.deadline_seconds)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one attempt goes: the vetted address, and the name the URL gave."""

    url: httpx2.URL  # the literal address in place of the name
    host: str  # the URL's host name: the Host header, the TLS server name
    host_header: str


class Refused(Exception):
    """An attempt that cannot be made: ``reason`` is the tenant's, ``detail`` our log's."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


async def destination(
    url: str, *, allow_private: bool, resolver: Resolver | None = None
) -> list[Destination]:
    """The addresses to try for ``url``, each vetted; resolved once, here, never again by
    the HTTP client (which gets the literal). Raises :class:`Refused`."""
    parts = urlsplit(url)
    name = normalize_host(parts.hostname or "")
    if parts.scheme not in ("http", "https") or name is None:
        raise Refused(REFUSED_BAD_URL, f"not an http(s) URL with a host: {url!r}")
    default_port = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise Refused(REFUSED_BAD_URL, f"bad port in {url!r}") from exc
    try:
        addresses = await resolve(name, port, resolver)
    except (OSError, UnicodeError) as exc:
        raise Refused(NOT_RESOLVED, f"{name} did not resolve: {exc}") from exc
    if not addresses:
        raise Refused(NOT_RESOLVED, f"{name} resolved to no address")
    if not allow_private:
        for address in addresses:
            refusal = address_refusal(address)
            if refusal is not None:  # one bad answer refuses the name: no picking around it
                raise Refused(REFUSED_NOT_PUBLIC, f"{name} resolves to {refusal}")
    original = httpx2.URL(url)
    host_header = _bracketed(name) if port == default_port else f"{_bracketed(name)}:{port}"
    return [Destination(original.copy_with(host=str(address)), name, host_header)
            for address in addresses]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True, slots=True)
class Attempt:
    delivered: bool
    status_code: int | None
    reason: str | None  # the tenant's; None when delivered


@dataclass(frozen=True, slots=True)
class Job:
    """One delivery: a run's end to its own URL (``endpoint`` None) or to an endpoint."""

    tenant: TenantId
    run: RunId
    endpoint: uuid.UUID | None
    attempts: int  # this attempt's number (claims so far)

    @property
    def name(self) -> str:
        return f"webhook {self.run}" + (f" endpoint {self.endpoint}" if self.endpoint else "")


class WebhookSender:
    """Claims due deliveries and sends each in its own task (``deliver_due`` returns at
    once); ``aclose`` cancels those still in flight (their claim lapses and another
    attempt follows: delivery is at-least-once)."""

    _SPENT_BATCH = 20

    def __init__(
        self, db: Database, *, allow_private: bool = False,
        limits: WebhookLimits | None = None, resolver: Resolver | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._db = db
        self._allow_private = allow_private
        self.limits = limits or WebhookLimits()
        self._resolver = resolver
        # No keep-alive: a pooled connection is keyed by address, and a TLS session made
        # for one tenant's host name must not carry another's request to the same address.
        # No proxy from the environment: it would resolve the name again.
        self._client = httpx2.AsyncClient(
            follow_redirects=False, trust_env=False, transport=transport,
            timeout=self.limits.deadline_seconds,
            limits=httpx2.Limits(max_keepalive_connections=0))
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: collections.Counter[str] = collections.Counter()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        """Cancel the deliveries in flight and wait until they have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        await self.stop()
        await self._client.aclose()

    async def drain(self) -> None:
        """Wait for the deliveries in flight (tests; a shutdown cancels them instead)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def deliver_due(self) -> int:
        """Start every delivery that is due now and fits in a free slot; return how many
        were started. Does not wait for them."""
        free = self.limits.total - len(self._tasks)
        if free <= 0:
            return 0
        busy = collections.Counter({t: n for t, n in self._in_flight.items() if n > 0})
        async with self._db.unscoped() as conn:
            spent = await conn.fetch(Q.spent_webhooks, self._SPENT_BATCH,
                                     self.limits.claim_seconds, MAX_ATTEMPTS)
            due = await conn.fetch(
                Q.claim_webhooks, free, self.limits.claim_seconds, MAX_ATTEMPTS,
                self.limits.per_tenant, list(busy), list(busy.values()))
            jobs = [Job(TenantId(r["tenant_id"]), RunId(r["run_id"]), None, r["attempts"])
                    for r in due]
            # Endpoints share the slots: what was just claimed counts as in flight.
            busy.update(job.tenant.value for job in jobs)
            to_endpoints = await conn.fetch(
                Q.claim_endpoint_deliveries, max(free - len(jobs), 0),
                self.limits.claim_seconds, MAX_ATTEMPTS, self.limits.per_tenant,
                list(busy), list(busy.values()))
        lapsed = [Job(TenantId(r["tenant_id"]), RunId(r["run_id"]), None, r["attempts"])
                  for r in spent]
        for r in to_endpoints:
            job = Job(TenantId(r["tenant_id"]), RunId(r["run_id"]), r["endpoint_id"],
                      r["attempts"])
            (lapsed if r["spent"] else jobs).append(job)
        for job in lapsed:  # never sent again: recorded as failed, as a last attempt is
            row = await self._job_row(job)
            if row is not None:
                await self._finish(job, row["webhook_url"], Attempt(False, None, INTERRUPTED))
        for job in jobs:
            task = asyncio.create_task(self._deliver(job), name=job.name)
            self._tasks.add(task)
            self._in_flight[job.tenant.value] += 1
            task.add_done_callback(functools.partial(self._done, tenant=job.tenant.value))
        return len(lapsed) + len(jobs)

    def _done(self, task: asyncio.Task[None], tenant: str) -> None:
        self._tasks.discard(task)
        self._in_flight[tenant] -= 1
        if self._in_flight[tenant] <= 0:
            del self._in_flight[tenant]
        if not task.cancelled() and task.exception() is not None:
            # The database went away mid-delivery, say: the claim lapses, it is tried again.
            logger.warning("webhook delivery stopped: %s", task.exception())

    async def _job_row(self, job: Job) -> Any:
        async with self._db.tenant_tx(job.tenant) as conn:
            if job.endpoint is None:
                return await conn.fetchrow(Q.webhook_job, job.tenant.value, job.run.uuid)
            return await conn.fetchrow(Q.endpoint_job, job.tenant.value, job.run.uuid,
                                       job.endpoint)

    async def _deliver(self, job: Job) -> None:
        row = await self._job_row(job)
        if row is None:  # delivered meanwhile, or the run or the endpoint is gone
            return
        body = dumps(_summary(job.run, row))
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(row["webhook_secret"], stamp, body,
                                   previous=row["previous_secret"]),
            "Idempotency-Key": str(job.run),
            "User-Agent": "tenantry-webhooks",
        }
        url: str = row["webhook_url"]
        attempt = await self._attempt(url, body, headers, job.tenant, job.run)
        await self._finish(job, url, attempt)

    async def _finish(self, job: Job, url: str, attempt: Attempt) -> None:
        """Record the attempt in the tenant's history and, with it, what follows: the
        delivery done (its outcome in the run's log, for the run's own URL), or retried."""
        last = attempt.delivered or job.attempts >= MAX_ATTEMPTS
        outcome = ("delivered" if attempt.delivered else "failed" if last else "retrying")
        tenant, run = job.tenant.value, job.run.uuid
        async with self._db.tenant_tx(job.tenant) as conn:
            if not last:
                changed = await conn.execute(
                    *((Q.webhook_retry_at, tenant, run) if job.endpoint is None
                      else (Q.endpoint_retry_at, tenant, run, job.endpoint)),
                    backoff_seconds(job.attempts))
            else:
                state = "delivered" if attempt.delivered else "failed"
                changed = await conn.execute(
                    *((Q.webhook_done, tenant, run, state) if job.endpoint is None
                      else (Q.endpoint_done, tenant, run, job.endpoint, state)))
            if not changed.endswith(" 1"):
                return  # another worker recorded it (a lapsed claim): once is enough
            await conn.execute(Q.record_attempt, tenant, uuid7(), run, job.endpoint, url,
                               job.attempts, outcome, attempt.status_code, attempt.reason)
            if last and job.endpoint is None:  # exactly one worker records the outcome
                event: WebhookOutcome = (
                    WebhookDelivered(url, job.attempts, attempt.status_code, None)
                    if attempt.delivered
                    else WebhookFailed(url, job.attempts, attempt.status_code, attempt.reason))
                await log.append(conn, job.tenant, job.run, event, epoch=None)

    async def _attempt(
        self, url: str, body: bytes, headers: dict[str, str], tenant: TenantId, run: RunId
    ) -> Attempt:
        context = {"tenant_id": tenant.value, "run_id": str(run)}
        try:
            async with asyncio.timeout(self.limits.deadline_seconds):
                targets = await destination(url, allow_private=self._allow_private,
                                            resolver=self._resolver)
                return await self._post(targets, body, headers, context)
        except Refused as exc:
            logger.warning("webhook not sent: %s", exc.detail, extra=context)
            return Attempt(False, None, exc.reason)
        except TimeoutError:
            logger.warning("webhook attempt timed out after %.0f s",
                           self.limits.deadline_seconds, extra=context)
            return Attempt(False, None, TIMED_OUT)

    async def _post(
        self, targets: list[Destination], body: bytes, headers: dict[str, str],
        context: dict[str, str],
    ) -> Attempt:
        for target in targets:
            request = self._client.build_request(
                "POST", target.url, content=body,
                headers={**headers, "Host": target.host_header},
                extensions={"sni_hostname": target.host})
            try:
                response = await self._client.send(request, stream=True)
            except httpx2.ConnectError as exc:
                logger.warning("webhook connect to %s failed: %s", target.url.host, exc,
                               extra=context)
                continue  # the name's next vetted address
            except (httpx2.HTTPError, OSError) as exc:
                logger.warning("webhook to %s failed: %s: %s", target.url.host,
                               type(exc).__name__, exc, extra=context)
                return Attempt(False, None, SEND_FAILED)
            try:
                await _read_some(response)
            except (httpx2.HTTPError, OSError) as exc:
                logger.info("webhook answer unread: %s", exc, extra=context)
            finally:
                await response.aclose()
            status = response.status_code
            if not 200 <= status < 300:
                logger.info("webhook answered %s", status, extra=context)
                return Attempt(False, status, f"HTTP {status}")
            return Attempt(True, status, None)
        return Attempt(False, None, CONNECT_FAILED)


async def _read_some(response: httpx2.Response) -> None:
    """Read at most MAX_RESPONSE_BYTES of the answer (an endless body is cut off here)."""
    seen = 0
    async for chunk in response.aiter_raw():
        seen += len(chunk)
        if seen >= MAX_RESPONSE_BYTES:
            return


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


