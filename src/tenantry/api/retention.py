"""Retention in the API (ADR 0017): the operator's policies, erasure and tombstone listing
(``/admin/v1``), and the tenant's own ``DELETE /v1/runs/{id}`` and tombstone lookup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from tenantry.api.admin import TENANT_NOT_FOUND
from tenantry.api.auth import PlatformDep, RunsReader, RunsWriter, operator
from tenantry.api.fields import Body
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import ascii_int, parse_or_404
from tenantry.ids import RunId, TenantId
from tenantry.retention import erase, tombstones
from tenantry.retention import policy as policies
from tenantry.retention.cleaner import Cleaner
from tenantry.retention.policy import MAX_DAYS, RetentionPolicy
from tenantry.runs import service as runs
from tenantry.tenants import service as tenants

admin_router = APIRouter(prefix="/admin/v1", tags=["operator"],
                         dependencies=[Depends(operator)])
router = APIRouter(prefix="/v1", tags=["runs"])

#: 0 (deleted at the next pass) up to 100 years; past that a value is a mistake.
Days = Annotated[int, Field(ge=0, le=MAX_DAYS)]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: A tombstone page's cursor: its last item's deletion time (microseconds since 1970; 16
#: digits reach the year 2286) and run id.
_TOMBSTONE_CURSOR = rf"^[0-9]{{1,16}}\.{RunId.pattern().removeprefix('^')}"
_DEFAULTS = RetentionPolicy()


class RetentionIn(Body):
    """The runs, tombstones and blobs parts of the policy (the audit part has its own
    endpoint and stays as it is). Fields left out take their defaults."""

    runs_days: Days = Field(description="Days a terminal run or task is kept after it "
                                        "ended; 0: deleted at the next cleaner pass.")
    tombstones_days: Days | None = Field(
        default=_DEFAULTS.tombstones_days,
        description="Days a deleted run's tombstone is kept; null: forever. While it "
                    "lives, the run's Idempotency-Key is not reusable.")
    blobs_follow_runs: bool = Field(default=_DEFAULTS.blobs_follow_runs,
                                    description="Delete a run's blobs (large tool "
                                                "outputs, sandbox saves) with it.")


class AuditRetentionIn(Body):
    days: Days | None = Field(description="Days an audit-log row is kept; null: forever. "
                                          "Each expiry leaves an audit row of its own.")


class RetentionOut(BaseModel):
    tenant_id: str
    runs_days: int
    tombstones_days: int | None = Field(description="null: kept forever.")
    audit_days: int | None = Field(description="null: kept forever.")
    blobs_follow_runs: bool
    updated_at: datetime | None = Field(description="null: never set (the defaults).")


class EraseJobOut(BaseModel):
    job_id: str
    tenant_id: str
    status: Literal["running", "done"] = Field(
        description="done once the tenant has no run left (a running run is deleted "
                    "after its worker has stopped it).")
    runs_total: int = Field(description="Runs the tenant had when the erase began.")
    runs_deleted: int
    runs_cancelled: int = Field(description="Live runs cancelled by the erase.")
    runs_left: int = Field(description="Runs not yet deleted, now.")
    secrets_deleted: int
    tool_servers_deleted: int
    blobs_queued: int = Field(description="Blobs queued for deletion with their runs.")
    requested_by: str
    created_at: datetime
    finished_at: datetime | None


class TombstoneUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class TombstoneOut(BaseModel):
    """What remains of a deleted run: never its input, answer or events."""

    run_id: str
    kind: str = Field(description="agent, task or activity.")
    agent_id: str
    agent_version: int
    parent_run_id: str | None
    status: Literal["finished", "failed", "cancelled", "dead_lettered"]
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime
    steps: int
    events: int = Field(description="Events its log held.")
    usage: TombstoneUsage
    cost_micros: int
    reason: Literal["retention", "request", "erase"]
    deleted_at: datetime


class TombstoneList(BaseModel):
    data: list[TombstoneOut]
    next_cursor: str | None


def _policy_out(tenant: TenantId, p: RetentionPolicy) -> RetentionOut:
    return RetentionOut(tenant_id=tenant.value, runs_days=p.runs_days,
                        tombstones_days=p.tombstones_days, audit_days=p.audit_days,
                        blobs_follow_runs=p.blobs_follow_runs, updated_at=p.updated_at)


def _job_out(job: erase.EraseJob) -> EraseJobOut:
    return EraseJobOut(
        job_id=job.job_id, tenant_id=job.tenant.value, status=job.status,
        runs_total=job.runs_total, runs_deleted=job.runs_deleted,
        runs_cancelled=job.runs_cancelled, runs_left=job.runs_left,
        secrets_deleted=job.secrets_deleted, tool_servers_deleted=job.tool_servers_deleted,
        blobs_queued=job.blobs_queued, requested_by=job.requested_by,
        created_at=job.created_at, finished_at=job.finished_at)


def _stone_out(t: tombstones.Tombstone) -> TombstoneOut:
    return TombstoneOut(
        run_id=str(t.run_id), kind=t.kind, agent_id=t.agent_id, agent_version=t.agent_version,
        parent_run_id=t.parent_run_id, status=t.status,
        created_at=t.created_at, started_at=t.started_at, ended_at=t.ended_at, steps=t.steps,
        events=t.events,
        usage=TombstoneUsage(input_tokens=t.input_tokens, output_tokens=t.output_tokens),
        cost_micros=t.cost_micros, reason=t.reason,
        deleted_at=t.deleted_at)


@admin_router.get("/tenants/{tenant_id}/retention", response_model=RetentionOut)
async def get_retention(tenant_id: str, p: PlatformDep) -> RetentionOut:
    """The tenant's retention in force: the defaults (30 days for runs, tombstones and
    audit kept forever, blobs with their run) until set, with `updated_at` null."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _policy_out(tenant, await policies.get(p.db, tenant))


@admin_router.put("/tenants/{tenant_id}/retention", response_model=RetentionOut)
async def put_retention(tenant_id: str, body: RetentionIn, p: PlatformDep) -> RetentionOut:
    """Replace how long the tenant's terminal runs and their tombstones are kept. It
    applies at the next cleaner pass; the audit retention is left as it is."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _policy_out(tenant, await policies.put(
        p.db, tenant, runs_days=body.runs_days, tombstones_days=body.tombstones_days,
        blobs_follow_runs=body.blobs_follow_runs))


@admin_router.put("/tenants/{tenant_id}/audit-retention", response_model=RetentionOut)
async def put_audit_retention(
    tenant_id: str, body: AuditRetentionIn, p: PlatformDep,
) -> RetentionOut:
    """Set how long the audit log is kept (its own policy: audit evidence outlives the runs
    it is about). Every expiry is itself recorded in the audit log."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _policy_out(tenant, await policies.put_audit(p.db, tenant, body.days))


@admin_router.post("/tenants/{tenant_id}/erase", status_code=202, response_model=EraseJobOut,
                   responses={202: links(GetEraseJob=to(
                       "GET", "/admin/v1/erase-jobs/{job_id}", "How far the erase has got.",
                       parameters={"job_id": "$response.body#/job_id"}))})
async def erase_tenant(tenant_id: str, p: PlatformDep) -> EraseJobOut:
    """Erase the tenant: from now on it admits nothing (409 `tenant_erased`), its API keys
    are revoked, its secrets, data key and tool servers are deleted at once, its live runs
    cancelled, and every cleaner pass deletes its runs (tombstones stay, per their policy).
    Asking again while the job runs returns the same job."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    job = await erase.start(p.db, tenant, requested_by="operator",
                            operator_db=p.cross_tenant_db)
    # The keys were revoked in bulk: no API process may keep a cached one.
    await tenants.announce_revocations(p.db, tenant, p.auth_cache)
    return _job_out(job)


@admin_router.get("/erase-jobs/{job_id}", response_model=EraseJobOut)
async def get_erase_job(job_id: str, p: PlatformDep) -> EraseJobOut:
    """How far an erase has got."""
    return _job_out(await erase.get(p.cross_tenant_db, job_id))


def _tombstone_position(text: str) -> tuple[datetime, RunId]:
    micros, _, run = text.partition(".")
    value = ascii_int(micros)
    if value is None:
        raise ValueError("not a tombstone cursor")
    return _EPOCH + timedelta(microseconds=value), RunId.parse(run)


def _tombstone_cursor(t: tombstones.Tombstone) -> str:
    return f"{(t.deleted_at - _EPOCH) // timedelta(microseconds=1)}.{t.run_id}"


_TombstonePage = Annotated[PageRequest, Depends(keyed_by(_TOMBSTONE_CURSOR))]


@admin_router.get("/tenants/{tenant_id}/tombstones", response_model=TombstoneList)
async def list_tombstones(tenant_id: str, page: _TombstonePage, p: PlatformDep) -> TombstoneList:
    """The tenant's deleted runs, newest deletion first."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    after = page.position(_tombstone_position)
    await policies.get(p.db, tenant)  # 404 for no such tenant, not an empty page
    found = await tombstones.page(p.db, tenant, after=after, limit=page.limit)
    return page.answer(TombstoneList, found, _stone_out, key=_tombstone_cursor)


@router.get("/tombstones/{run_id}", response_model=TombstoneOut)
async def get_tombstone(run_id: str, tenant: RunsReader, p: PlatformDep) -> TombstoneOut:
    """What remains of one of this tenant's deleted runs."""
    run = parse_or_404(RunId, run_id, tombstones.NO_TOMBSTONE)
    return _stone_out(await tombstones.get(p.db, tenant, run))


_DELETED = links(GetTombstone=to(
    "GET", "/v1/tombstones/{run_id}", "What remains of the run.",
    parameters={"run_id": "$request.path.run_id"}))
_DELETE_CONFLICT: dict[int | str, dict[str, Any]] = {204: _DELETED, 409: {
    "description": "`conflict`: the run has not ended (`run_status` says what it is: "
                   "cancel it first); or it ended but is kept for now, `blocked_by` says "
                   "why: `webhook_pending` (its webhook is not delivered yet), "
                   "`live_children` (a run it started has not ended) or `pending_approval`. "
                   "Nothing was deleted.",
    "content": {"application/problem+json": {"schema": {"allOf": [
        {"$ref": "#/components/schemas/Problem"},
        {"type": "object", "required": ["run_status"], "properties": {
            "run_status": {"type": "string"},
            "blocked_by": {"type": "string", "enum": list(erase.BLOCKERS)}}},
    ]}}},
}}


@router.delete("/runs/{run_id}", status_code=204, response_class=Response,
               responses=_DELETE_CONFLICT)
async def delete_run(run_id: str, tenant: RunsWriter, p: PlatformDep) -> Response:
    """Delete an ended run (finished, failed, cancelled, or a dead-lettered task) now,
    with its events and blobs. A tombstone remains (GET /v1/tombstones/{run_id}); every
    other route answers 404 for it, as for a run that never existed."""
    run = parse_or_404(RunId, run_id, runs.NOT_FOUND)
    await erase.delete_run(Cleaner(p.db, p.blobs), tenant, run)
    return Response(status_code=204)
