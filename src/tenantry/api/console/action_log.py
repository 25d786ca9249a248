"""The operator's action log (migrations 0025, 0046, 0056): each action taken from the
console — cancel a run, decide an approval, requeue a task, revoke a key, pause or resume
admissions, connect an OAuth tool server — and every change made through the operator API,
named by its route (``POST /admin/v1/tenants``, recorded by ``api/operator_actions.py``), as
who did it, to which tenant (none for a platform-wide one) and target, when, and how it
ended.

Recorded after the action, with its outcome (``done`` or why it was refused), through the
console role's definer function: the table spans tenants, so the tenant pool may not touch
it. A forged or missing CSRF token is not an action and is not recorded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import TenantId

Q = load(__package__, "action_log.sql")

PAGE = 50
DONE = "done"
OPERATOR_API = "operator API"


class Action(StrEnum):
    CANCEL_RUN = "cancel_run"
    APPROVE = "approve"
    DENY = "deny"
    REQUEUE_TASK = "requeue_task"
    REVOKE_API_KEY = "revoke_api_key"
    PAUSE_ADMISSIONS = "pause_admissions"
    RESUME_ADMISSIONS = "resume_admissions"
    CONNECT_TOOL_SERVER = "connect_tool_server"  # migration 0046


@dataclass(frozen=True, slots=True)
class Entry:
    action_id: int
    at: datetime
    actor: str
    action: str  # an Action, or an operator API route: 'PUT /admin/v1/prices/{model}'
    tenant: str | None  # None: platform-wide
    target: str
    outcome: str
    detail: str | None


def session_actor(ident: str) -> str:
    return f"console session {ident}"


async def record(db: Database, *, actor: str, action: Action | str,
                 tenant: TenantId | str | None, target: str, outcome: str = DONE,
                 detail: str | None = None) -> int:
    """``db``: the console's pool (the only one that may call the function). ``action``: a
    console action, or the operator route taken (``METHOD /admin/v1/…``, the table's check);
    ``tenant`` None: platform-wide."""
    async with db.unscoped() as conn:
        action_id: int = await conn.fetchval(
            Q.record_action, actor, str(action), None if tenant is None else str(tenant),
            target[:200], outcome, detail)
    return action_id


async def entries(db: Database, *, tenant: TenantId | None, before: int | None) -> list[Entry]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.actions, tenant.value if tenant else None, before, PAGE)
    return [Entry(r["action_id"], r["at"], r["actor"], r["action"], r["tenant_id"],
                  r["target"], r["outcome"], r["detail"]) for r in rows]
