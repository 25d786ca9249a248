"""What every request handler needs, built for the app's lifespan (``bootstrap.api``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tenantry.activities.tasks.store import ActivityStore
from tenantry.api.streams import StreamSlots
from tenantry.blobs import Blobs
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.runs.hub import EventHub
from tenantry.runs.inprocess import LocalWorkers
from tenantry.runs.intake import RunIntake
from tenantry.scheduler.admission import CellCapacity
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tenants.oidc import OidcProvider
from tenantry.tenants.operator_tokens import OperatorTokens
from tenantry.tools.destinations import MODEL_ACCOUNT, Destinations
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault
from tenantry.vault.crypto import MasterKey


@dataclass(slots=True)
class Platform:
    settings: Settings
    db: Database
    hub: EventHub
    mcp: McpToolClient
    vault: Vault | None
    # Set when the server starts shutting down: open event streams end at once instead of
    # holding the shutdown for its whole grace period.
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    auth_cache: AuthCache = field(default_factory=AuthCache)
    master: MasterKey | None = None  # seals platform model accounts' API keys
    cell: CellCapacity | None = None  # admission's view of the whole cell's queue
    local: LocalWorkers | None = None  # workers in this process (`tenantry up`), if any
    # The console's cross-tenant reads (ADR 0011): a pool whose login may become
    # tenantry_console, which the tenant pool's login cannot; None: ``db`` (tests).
    console_db: Database | None = None
    streams: StreamSlots = field(default_factory=StreamSlots)  # open SSE streams
    # Tenants' reads of their runs' blobs, and where a deleted run's blobs are deleted
    # from (DELETE /v1/runs/{id}); None: reads are 404 and deletions stay in the outbox
    # for a cleaner that has the store.
    blobs: Blobs | None = None
    # The operator's rules for where model accounts tenants register may be (the tool
    # servers' are ``mcp.destinations``); the default: the strict ones.
    model_destinations: Destinations = field(
        default_factory=lambda: Destinations(subject=MODEL_ACCOUNT))
    # The OpenID Connect provider tenants' people sign in with (TENANTRY_OIDC_ISSUER);
    # None: one-time sign-in links only.
    oidc: OidcProvider | None = None
    # Activities and their tasks, admitted against the same cell as runs.
    activities: ActivityStore = field(init=False)
    # POST /v1/runs' group commit (ADR 0019); closed before the pool.
    intake: RunIntake = field(init=False)
    # The operator tokens in force (ADR 0043 §8): the configured one and any a rotation made.
    operator_tokens: OperatorTokens = field(init=False)

    def __post_init__(self) -> None:
        self.activities = ActivityStore(self.db, max_queued_runs=None, cell=self.cell)
        self.intake = RunIntake(self.db)
        self.operator_tokens = OperatorTokens(self.db, self.settings.operator_token)

    @property
    def cross_tenant_db(self) -> Database:
        """The pool for the console's cross-tenant reads (console pages, the operator's
        inbox): the only one that may call the ``tenantry_console_*`` functions."""
        return self.console_db or self.db
