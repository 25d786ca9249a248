"""Wiring the run engine's concrete pieces together, in one place (no import-time globals):
database pool, model client, MCP client, tool gateway, webhooks, the worker loop, and the
retention cleaner, the exporter (tenants' exports, ADR 0044) and the scheduled billing
reconciliation beside it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tenantry.blobs import WORKER_PATIENCE_SECONDS, ObjectStore, open_blobs
from tenantry.bootstrap.blob_store import object_store
from tenantry.bootstrap.secrets import master_key
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.outage import Outage
from tenantry.exports.runner import Exporter
from tenantry.ledger.prices import PriceBook
from tenantry.models.accounts import ANY_MODEL, ANY_REGION, ModelAccount
from tenantry.models.clients import http_client
from tenantry.models.gateway import GatewaySettings, ModelGateway
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tenantry.runs.engine import Engine, EngineSettings
from tenantry.runs.inprocess import LocalWorkers
from tenantry.runs.lease import worker_id
from tenantry.runs.webhooks import WebhookLimits, WebhookSender
from tenantry.runs.worker import Worker
from tenantry.sandbox import probe as sandbox_probe
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.telemetry.blob_store import watch_blob_store
from tenantry.telemetry.spans import from_exporter
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.tools.builtin import BrowserPolicy, BuiltinTools
from tenantry.tools.destinations import MODEL_ACCOUNT, Destinations
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault
from tenantry.vault.crypto import MasterKey

logger = logging.getLogger(__name__)

# Accounts from configuration come after every registered account (lower goes first).
CONFIGURED_PRIORITY = 1000
# How long a stopping worker lets its cleaner finish the batch in flight (one transaction;
# cancelled past this, it rolls back whole and the next pass does it again).
CLEANER_STOP_SECONDS = 5.0


def configured_account(settings: Settings, base_url: str) -> tuple[ModelAccount, str | None]:
    """The account TENANTRY_MODEL_BASE_URL describes: any model, after registered ones."""
    account = ModelAccount(
        account_id="configured", provider=settings.model_provider, base_url=base_url,
        models=(ANY_MODEL,), region=ANY_REGION, priority=CONFIGURED_PRIORITY,
    )
    return account, settings.model_api_key


@asynccontextmanager
async def model_gateway(
    settings: Settings, db: Database, *, vault: Vault | None, master: MasterKey | None,
    observer: WorkerMetrics | None = None,
) -> AsyncIterator[ModelGateway]:
    """The gateway over the registered accounts plus, from configuration, the endpoint in
    TENANTRY_MODEL_BASE_URL — or, when none is set, the built-in scripted model on a
    loopback port serving the ``scripted`` models (demos and local development)."""
    async with contextlib.AsyncExitStack() as stack:
        if settings.model_base_url:
            implicit = [configured_account(settings, settings.model_base_url)]
        else:
            # Only here: a production worker (a model URL) never loads its HTTP server.
            from tenantry.models.scripted_server import ScriptedModelServer

            server = await stack.enter_async_context(ScriptedModelServer())
            logger.info("no TENANTRY_MODEL_BASE_URL: the built-in scripted model serves "
                        "the `scripted` models", extra={"base_url": server.base_url})
            implicit = [(ModelAccount(
                account_id="scripted", provider="scripted", base_url=server.base_url,
                models=("scripted", "scripted/*"), region=ANY_REGION,
                priority=CONFIGURED_PRIORITY), None)]
        # Accounts tenants registered themselves connect only where the operator's rules
        # for tenants' own destinations allow (tools/destinations.py), at every connection.
        guard = Destinations.of(settings, MODEL_ACCOUNT).connect_to
        gateway = ModelGateway(db, vault=vault, master=master, implicit=implicit,
                               observer=observer, settings=GatewaySettings(
                                   no_stream=frozenset(settings.model_no_stream)),
                               client_factory=functools.partial(http_client, guard=guard))
        yield await stack.enter_async_context(gateway)


@asynccontextmanager
async def engine(
    settings: Settings, dsn: str, *, name: str = "worker", metrics: WorkerMetrics | None = None,
    outage: Outage | None = None, objects: ObjectStore | None = None,
) -> AsyncIterator[Engine]:
    """``metrics``: the process's metrics, shared by its worker loops (None: this engine
    gets its own, with spans as TENANTRY_OTEL_EXPORTER says); ``outage``: the process's
    record of database outages (None: this engine's own); ``objects``: the object store of
    its blobs (None: the configured one, opened and checked here)."""
    own_metrics = metrics is None
    if metrics is None:
        metrics = process_metrics(settings)
    db = await Database.connect(dsn, role=settings.db_role or None,
                                min_size=min(2, settings.db_pool_max),
                                max_size=settings.db_pool_max, outage=outage)
    master = master_key(settings)
    vault = Vault(db, master) if master is not None else None
    if vault is None:
        logger.warning("no vault master key: tool servers with credentials will be refused")
    try:
        async with contextlib.AsyncExitStack() as stack:
            if objects is None:
                objects = await stack.enter_async_context(object_store(settings))
            # A worker's writes wait out a short object-store outage with their lease held.
            blobs = open_blobs(settings, db, objects, patience_seconds=WORKER_PATIENCE_SECONDS)
            stack.callback(watch_blob_store(metrics.registry, lambda: blobs.failures))
            mcp = await stack.enter_async_context(
                McpToolClient(destinations=Destinations.of(settings)))
            model = await stack.enter_async_context(model_gateway(
                settings, db, vault=vault, master=master, observer=metrics))
            boxes = await stack.enter_async_context(
                sandbox_probe.sandbox_manager(settings, blobs))
            gateway = ToolGateway(db, mcp, vault=vault, blobs=blobs,
                                  builtins=BuiltinTools(boxes, browser_policy(settings)))
            yield Engine(
                db=db, model=model, tools=gateway, prices=PriceBook(db),
                worker=worker_id(name),
                settings=EngineSettings(lease_seconds=settings.lease_seconds,
                                        egress_flag_threshold=settings.egress_flag_threshold,
                                        child_max_depth=settings.child_max_depth,
                                        child_max_per_run=settings.child_max_per_run),
                sandboxes=boxes, metrics=metrics, blobs=blobs,
            )
    finally:
        await db.close()
        if own_metrics:
            metrics.spans.shutdown()


def cleanup_settings(settings: Settings) -> CleanupSettings:
    every = float(settings.retention_every_seconds)
    # Looked for at least as often as a tenant's pass is due (5 s unless that is sooner).
    return CleanupSettings(batch=settings.retention_batch, every_seconds=every,
                           poll_seconds=min(CleanupSettings().poll_seconds, every))


def process_metrics(settings: Settings) -> WorkerMetrics:
    """One per process: the worker loops' counters and, if configured, their spans."""
    return WorkerMetrics(spans=from_exporter(settings.otel_exporter))


async def run_worker(
    settings: Settings, dsn: str, stop: asyncio.Event, local: LocalWorkers | None = None,
    metrics: WorkerMetrics | None = None, outage: Outage | None = None, *,
    cleaner: bool = True,
) -> None:
    """``local``: where an API in this same process (``tenantry up``) sees this worker;
    ``metrics``: the process's metrics (the API's /metrics, or --metrics-port, shows them);
    ``outage``: the process's record of database outages, shared by its loops and API;
    ``cleaner``: run the retention cleaner (unless TENANTRY_RETENTION is off), the
    exporter and the scheduled billing reconciliation (when TENANTRY_RECONCILE_ADMIN_KEYS
    names accounts) beside the loop — one of each per process: ``up`` asks it of its first loop
    only."""
    async with (engine(settings, dsn, metrics=metrics, outage=outage) as eng,
                contextlib.AsyncExitStack() as shown):
        webhooks = WebhookSender(eng.db, allow_private=settings.webhook_allow_private,
                                 limits=WebhookLimits(
                                     deadline_seconds=settings.webhook_deadline_seconds,
                                     per_tenant=settings.webhook_concurrency_per_tenant,
                                     total=settings.webhook_concurrency))
        control = await Database.connect(dsn, role=settings.db_role or None, min_size=1,
                                         max_size=2, outage=eng.db.outage)
        # On the engine's pool and blob store: what it deletes is what the engine wrote.
        cleaning = asyncio.create_task(
            Cleaner(eng.db, eng.blobs, cleanup_settings(settings)).run(stop),
            name="retention-cleaner") if cleaner and settings.retention else None
        # Exports read what the engine's pool reads and write to the store its blobs are in.
        exporting = asyncio.create_task(
            Exporter(eng.db, eng.blobs).run(stop),
            name="exporter") if cleaner and eng.blobs is not None else None
        # One per process like the cleaner; its lease makes it one per cell. Imported only
        # when configured: the provider reports' models (pydantic) are no part of the step
        # path a worker loads before its first claim (tests/e2e/test_worker_start.py).
        reconciling = None
        if cleaner and settings.admin_keys:
            from tenantry.bootstrap.billing import scheduled_reconciliation

            reconciling = asyncio.create_task(
                scheduled_reconciliation(settings, eng.db).run(stop),
                name="billing-reconciliation")
        try:
            loop = Worker(eng, dsn=dsn, concurrency=settings.worker_concurrency,
                          webhooks=webhooks, control=control,
                          claim_order=settings.claim_order, role=settings.db_role or None,
                          load=CellLoad(control, ShedThresholds.of(settings),
                                        settings.load_read_seconds))
            if local is not None:  # shown once all of it runs
                shown.enter_context(local.serving(eng, loop))
            await loop.run(stop)
        finally:
            for task in (cleaning, exporting, reconciling):
                if task is not None:
                    await _stop_beside(task, graceful=stop.is_set())
            await control.close()
            await webhooks.aclose()


async def _stop_beside(task: asyncio.Task[None], *, graceful: bool) -> None:
    """Stopping (``stop`` set), the cleaner ends after its batch in flight; when the worker
    loop ended otherwise (it crashed), or the batch takes too long, it is cancelled. Either
    way no task is left behind, and our own cancellation is never swallowed. The exporter
    likewise: an export cancelled mid-way keeps its row, which another process takes up
    once its lease lapses."""
    try:
        if graceful:
            await asyncio.wait({task}, timeout=CLEANER_STOP_SECONDS)
    finally:
        task.cancel()
        await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        logger.error("%s failed", task.get_name(), exc_info=task.exception())


def browser_policy(settings: Settings) -> BrowserPolicy:
    return BrowserPolicy(page_timeout_s=float(settings.browser_page_timeout_seconds),
                         max_pages=settings.browser_max_pages,
                         max_bytes=settings.browser_max_mib * 1024 * 1024,
                         allow_dev_backends=settings.browser_dev_backends)
