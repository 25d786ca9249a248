"""Tenant API: the provider model snapshots an agent's runs were served, their changes,
holding the agent's runs on the accepted snapshot, and promoting another
(agents/snapshots.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from tenantry.agents import snapshots
from tenantry.api.auth import AgentsManager, AgentsManagerCaller, PlatformDep, RunsReader
from tenantry.api.fields import Body, Text
from tenantry.api.params import parse_or_404
from tenantry.ids import AgentId

router = APIRouter(prefix="/v1/agents", tags=["agents"])

ModelName = Annotated[Text, Field(min_length=1, max_length=200,
                                  description="The platform model name the agent uses.")]
SnapshotId = Annotated[Text, Field(min_length=1, max_length=snapshots.MAX_ID_CHARS)]
AccountOwner = Literal["platform", "tenant"]
OWNERS: tuple[AccountOwner, ...] = ("platform", "tenant")


class SnapshotOut(BaseModel):
    model: str = Field(description="The platform model name an agent version names "
                                   "(e.g. `gpt-4o`).")
    accepted: str = Field(description="The provider's snapshot id accepted for it: the first "
                                      "one its replies reported, or the one promoted since.")
    accepted_at: datetime
    changed_to: str | None = Field(
        description="Another snapshot id the provider reported since (the latest such); "
                    "null while it serves the accepted one.")
    changed_at: datetime | None = Field(description="When `changed_to` was first seen.")
    held: bool = Field(description="The agent's runs ask the provider for `accepted` by its "
                                   "id instead of the model name (from each run's next "
                                   "load) — on accounts of the owners in `accepted_on` "
                                   "only; on any other account they ask for the name.")
    accepted_on: list[AccountOwner] = Field(
        description="Whose accounts reported `accepted`: `platform` (the platform's "
                    "accounts), `tenant` (your own, bring-your-own-key accounts). A held "
                    "snapshot is asked for only on accounts of these owners; empty: not "
                    "known yet (noted before owners were), held on no account until one "
                    "reports it.")
    changed_on: list[AccountOwner] = Field(
        description="Whose accounts reported `changed_to` (empty while there is none).")


class PromotionOut(BaseModel):
    model: str
    previous: str = Field(description="The snapshot accepted before.")
    provider_model: str = Field(description="The snapshot accepted since.")
    promoted_by: str = Field(description="The id of the API key that promoted it.")
    promoted_at: datetime


class SnapshotList(BaseModel):
    data: list[SnapshotOut] = Field(description="One entry per model the agent's runs were "
                                                "served, by model name.")
    promotions: list[PromotionOut] = Field(
        description=f"The agent's latest promotions (at most {snapshots.PROMOTIONS_LISTED}), "
                    "newest first.")


class HoldBody(Body):
    model: ModelName
    held: bool = Field(description="true: the agent's runs ask for the accepted snapshot by "
                                   "its id; false: for the model name again (the provider's "
                                   "current snapshot).")


class PromoteBody(Body):
    model: ModelName
    provider_model: SnapshotId = Field(
        description="The snapshot to accept: the entry's `changed_to`, or its `accepted` "
                    "(to keep it and clear the change).")


_NO_SNAPSHOT = ("`conflict` (`field`: model): no snapshot recorded for that model yet "
                "(none of the agent's runs used it)")
_HOLD_RESPONSES: dict[int | str, dict[str, Any]] = {409: {"description": _NO_SNAPSHOT}}
_PROMOTE_RESPONSES: dict[int | str, dict[str, Any]] = {409: {
    "description": f"{_NO_SNAPSHOT}; or (`field`: provider_model) `provider_model` is "
                   "neither the entry's `accepted` nor its `changed_to`."}}


def _out(s: snapshots.Snapshot) -> SnapshotOut:
    return SnapshotOut(model=s.model, accepted=s.accepted, accepted_at=s.accepted_at,
                       changed_to=s.changed_to, changed_at=s.changed_at, held=s.held,
                       accepted_on=_owners(s.accepted_on), changed_on=_owners(s.changed_on))


def _owners(owners: tuple[str, ...]) -> list[AccountOwner]:
    return [owner for owner in OWNERS if owner in owners]


@router.get("/{agent_id}/model-snapshots", response_model=SnapshotList)
async def list_snapshots(agent_id: str, tenant: RunsReader, p: PlatformDep) -> SnapshotList:
    """List the agent's model snapshots.

    For each model the agent uses: the provider's snapshot it has accepted, the one the
    provider now answers with, and whether its runs are held on the accepted one."""
    agent = parse_or_404(AgentId, agent_id, snapshots.AGENT_NOT_FOUND)
    found, promotions = await snapshots.listed(p.db, tenant, agent)
    return SnapshotList(
        data=[_out(s) for s in found],
        promotions=[PromotionOut(model=r.model, previous=r.previous,
                                 provider_model=r.provider_model,
                                 promoted_by=str(r.promoted_by), promoted_at=r.promoted_at)
                    for r in promotions])


@router.post("/{agent_id}/model-snapshots/hold", response_model=SnapshotOut,
             responses=_HOLD_RESPONSES)
async def hold_snapshot(
    agent_id: str, body: HoldBody, tenant: AgentsManager, p: PlatformDep,
) -> SnapshotOut:
    """Hold the agent's runs on the accepted snapshot of a model (or release them). A run
    already going picks it up when it is next loaded (after a wait, a park or a restart)."""
    agent = parse_or_404(AgentId, agent_id, snapshots.AGENT_NOT_FOUND)
    return _out(await snapshots.hold(p.db, tenant, agent, body.model, body.held))


@router.post("/{agent_id}/model-snapshots/promote", response_model=SnapshotOut,
             responses=_PROMOTE_RESPONSES)
async def promote_snapshot(
    agent_id: str, body: PromoteBody, caller: AgentsManagerCaller, p: PlatformDep,
) -> SnapshotOut:
    """Accept a snapshot: the one the provider changed to (or the accepted one, keeping it);
    the change is cleared and the promotion recorded with the calling API key. A hold stays:
    held runs ask for the newly accepted snapshot."""
    agent = parse_or_404(AgentId, agent_id, snapshots.AGENT_NOT_FOUND)
    return _out(await snapshots.promote(p.db, caller.tenant, agent, body.model,
                                        body.provider_model, caller.key))
