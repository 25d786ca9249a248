"""Bringing a platform up: resolve the database (embedded or external), migrate, and the
dev-only conveniences of ``tenantry up`` (operator token, demo tenant)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import Migration, migrate
from tenantry.errors import Conflict
from tenantry.ids import AgentId, TenantId
from tenantry.tenants import service as tenants
from tenantry.vault import MasterKey

DEMO_TENANT = TenantId("demo")
DEMO_AGENT = "demo-agent"
DEMO_KEY_NAME = "tenantry up --demo"


@dataclass(slots=True)
class ResolvedDatabase:
    dsn: str
    embedded: EmbeddedPostgres | None

    def stop(self) -> None:
        if self.embedded is not None and self.embedded.started_here:
            self.embedded.stop()


def resolve_database(settings: Settings) -> ResolvedDatabase:
    if settings.database_url:
        return ResolvedDatabase(settings.database_url, None)
    embedded = EmbeddedPostgres(settings.data_dir)
    return ResolvedDatabase(embedded.start(), embedded)


async def apply_migrations(
    dsn: str, on_apply: Callable[[Migration], None] | None = None
) -> list[Migration]:
    conn = await asyncpg.connect(dsn)
    try:
        return await migrate(conn, on_apply)
    finally:
        await conn.close()


def operator_token(settings: Settings) -> str:
    """The configured token, else one kept in the data dir (mode 0600) across restarts."""
    if settings.operator_token:
        return settings.operator_token
    path = settings.data_dir / "operator_token"
    if path.exists():
        return path.read_text().strip()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    token = "op_" + secrets.token_urlsafe(32)
    _write_private(path, token)
    return token


def master_key(settings: Settings, *, create: bool = False) -> MasterKey | None:
    """TENANTRY_MASTER_KEY, else the dev key kept in the data dir (made by `up` on first
    start). Production sets the variable; the file is a development convenience."""
    if settings.master_key:
        return MasterKey.parse(settings.master_key)
    path = settings.data_dir / "master_key"
    if path.exists():
        return MasterKey.parse(path.read_text())
    if not create:
        return None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    key = MasterKey.generate()
    _write_private(path, key.encoded())
    return key


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text(text)
    tmp.rename(path)


@dataclass(frozen=True, slots=True)
class Demo:
    tenant: TenantId
    api_key: str
    agent_id: AgentId


async def ensure_demo(dsn: str, settings: Settings) -> Demo:
    """The demo tenant and agent (created once), and a fresh API key for this start."""
    db = await Database.connect(dsn, role=settings.db_role or None, min_size=1, max_size=2)
    try:
        with contextlib.suppress(Conflict):  # made by an earlier start
            await tenants.create_tenant(db, "Demo tenant", tenant_id=DEMO_TENANT)
        # One live demo key at a time: each start revokes the previous start's key.
        for previous in await tenants.list_api_keys(db, DEMO_TENANT):
            if previous.name == DEMO_KEY_NAME and previous.revoked_at is None:
                await tenants.revoke_api_key(db, DEMO_TENANT, previous.key_id)
        key = await tenants.issue_api_key(db, DEMO_TENANT, DEMO_KEY_NAME)
        existing = [a for a in await agents.list_agents(db, DEMO_TENANT, limit=200)
                    if a.name == DEMO_AGENT]
        if existing:
            agent_id = existing[0].agent_id
        else:
            spec = AgentSpec(
                model="scripted",
                system_prompt="You are the Tenantry demo agent. Answer briefly.",
                limits=Limits(max_steps=10, max_tokens=20_000, max_cost_micros=100_000),
            )
            agent_id = (await agents.create_agent(db, DEMO_TENANT, DEMO_AGENT, spec)).agent_id
        return Demo(DEMO_TENANT, key.api_key, agent_id)
    finally:
        await db.close()
