"""Tenant API: an agent's test sets, evaluations of a candidate against a baseline, and
promotion of a version to live (ADR 0034). The platform runs the cases and checks what
can be checked mechanically; whether a version goes live is the tenant's act. The bodies
are ``api/evaluation_bodies.py``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from tenantry.agents import service as agents
from tenantry.api.auth import AgentsManager, AgentsManagerCaller, PlatformDep, RunsReader
from tenantry.api.evaluation_bodies import (
    CreateEvaluation,
    CreateTestSet,
    EvaluationList,
    EvaluationOut,
    EvaluationSummaryOut,
    SideSpecOut,
    TestSetList,
    TestSetOut,
    TestSetSummaryOut,
    report_out,
    test_set_out,
)
from tenantry.api.fields import Body, PositiveInt4
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.run_bodies import OVERLOADED
from tenantry.errors import Conflict, NotFound
from tenantry.evaluations import service, test_sets
from tenantry.ids import AgentId, EvaluationId, TestSetId

router = APIRouter(prefix="/v1/agents", tags=["evaluations"])


# The promotion's bodies live here: the OpenAPI document names them by this module, since
# api/model_snapshots.py has bodies of the same names.
class PromoteBody(Body):
    version: PositiveInt4
    evaluation_id: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description="Promote only if this evaluation, of exactly this "
                                  "version, has ended with every case passed (else 409).")


class PromotionOut(BaseModel):
    promotion_id: str
    agent_id: str
    version: int
    previous_version: int
    promoted_by: str = Field(description="Who promoted it: the id of the API key (`key_…`), "
                                         "or `user:<user id>` for a person in the tenant "
                                         "console.")
    evaluation_id: str | None
    promoted_at: datetime


class PromotionList(BaseModel):
    data: list[PromotionOut]


AGENT_NOT_FOUND = agents.NOT_FOUND


def _agent(agent_id: str) -> AgentId:
    return parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)


@router.post("/{agent_id}/test-sets", status_code=201, response_model=TestSetOut,
             responses={201: links(
                 GetTestSet=to("GET", "/v1/agents/{agent_id}/test-sets/{test_set_id}",
                               "The test set just created.", parameters={
                                   "agent_id": "$request.path.agent_id",
                                   "test_set_id": "$response.body#/test_set_id"}),
                 Evaluate=to("POST", "/v1/agents/{agent_id}/evaluations", "Evaluate the "
                             "agent's live version on it.", parameters={
                                 "agent_id": "$request.path.agent_id"},
                             body={"test_set_id": "$response.body#/test_set_id",
                                   "candidate": {"version": 1}})),
                 409: {"description": "`conflict` (with `field`): the agent has a "
                                              "test set of this name, or a case's `from_run` "
                                              "names no finished run of this agent."}})
async def create_test_set(
    agent_id: str, body: CreateTestSet, response: Response, tenant: AgentsManager, p: PlatformDep,
) -> TestSetOut:
    """Create a test set.

    Named cases for the agent: an input, the checks its answer must pass, and the tool
    results to use (recorded, stubbed, or taken from an earlier run)."""
    agent = _agent(agent_id)
    created = await test_sets.create(p.db, tenant, agent, body.name,
                                     tool_results=body.tool_results, stubs=body.stubs,
                                     cases=[case.to_json() for case in body.cases])
    response.headers["Location"] = f"/v1/agents/{agent}/test-sets/{created.test_set_id}"
    return test_set_out(created)


_TestSetPage = Annotated[PageRequest, Depends(keyed_by(TestSetId.pattern()))]


@router.get("/{agent_id}/test-sets", response_model=TestSetList)
async def list_test_sets(
    agent_id: str, page: _TestSetPage, tenant: RunsReader, p: PlatformDep,
) -> TestSetList:
    """A page of the agent's test sets, newest first: each one's name, tool results and how
    many cases it has, never the cases (read one test set to see them)."""
    agent = _agent(agent_id)
    found = await test_sets.list_for(p.db, tenant, agent, before=page.position(TestSetId.parse),
                                     limit=page.limit)
    return page.answer(TestSetList, found, _test_set_summary,
                       key=lambda t: str(t.test_set_id))


def _test_set_summary(t: test_sets.TestSetSummary) -> TestSetSummaryOut:
    return TestSetSummaryOut(test_set_id=str(t.test_set_id), agent_id=str(t.agent_id),
                             name=t.name, tool_results=t.tool_results, cases=t.cases,
                             created_at=t.created_at)


@router.get("/{agent_id}/test-sets/{test_set_id}", response_model=TestSetOut)
async def get_test_set(
    agent_id: str, test_set_id: str, tenant: RunsReader, p: PlatformDep,
) -> TestSetOut:
    """Get a test set.

    Its cases, checks and tool results."""
    agent = _agent(agent_id)
    found = parse_or_404(TestSetId, test_set_id, test_sets.NOT_FOUND)
    return test_set_out(await test_sets.get(p.db, tenant, agent, found))


@router.post("/{agent_id}/evaluations", status_code=201, response_model=EvaluationOut,
             responses={201: links(GetEvaluation=to(
                 "GET", "/v1/agents/{agent_id}/evaluations/{evaluation_id}",
                 "The evaluation just started.", parameters={
                     "agent_id": "$request.path.agent_id",
                     "evaluation_id": "$response.body#/evaluation_id"})),
                 409: {"description": "`conflict` (with `field`): `test_set_id` "
                                      "names no test set of this agent, a side names "
                                      "a version it does not have, a version starts "
                                      "child runs or activities (not supported yet), or "
                                      "a case of the test set was made from a run since "
                                      "deleted (`cases_without_their_run` names them)."},
                 # Its runs are batch runs: refused whenever the cell sheds those.
                 503: OVERLOADED})
async def create_evaluation(
    agent_id: str, body: CreateEvaluation, response: Response, who: AgentsManagerCaller,
    p: PlatformDep,
) -> EvaluationOut:
    """Start an evaluation.

    Runs the test set's cases on a candidate version and on the baseline (the live version
    by default); the report fills in as the runs end."""
    tenant, by = who.tenant, str(who.key)
    agent = _agent(agent_id)
    # Every case is two new batch runs (ADR 0034): a cell shedding batch runs refuses the
    # evaluation as it refuses `POST /v1/runs` at batch priority (ADR 0008) — whole, before
    # anything is read or written. (No idempotency key: there is no accepted retry to answer.)
    if p.cell is not None and (overloaded := await p.cell.refusal(service.PRIORITY)):
        raise overloaded
    live = await agents.get_agent(p.db, tenant, agent)  # 404 for another tenant's agent
    try:
        test_set = await test_sets.get(p.db, tenant, agent, TestSetId.parse(body.test_set_id))
    except (ValueError, NotFound):
        raise Conflict("test_set_id: no test set of this agent with this id",
                       field="test_set_id") from None
    baseline = body.baseline.version or live.live_version
    candidate = body.candidate.version or baseline
    for side, number in (("baseline", baseline), ("candidate", candidate)):
        if number > live.version:
            raise Conflict(f"{side}.version: this agent has no version {number}",
                           field=f"{side}.version")
    started = await service.start(p.db, tenant, agent, test_set, baseline=baseline,
                                  candidate=candidate, candidate_model=body.candidate.model,
                                  by=by)
    response.headers["Location"] = f"/v1/agents/{agent}/evaluations/{started.evaluation_id}"
    return report_out(await service.report(p.db, tenant, agent, started.evaluation_id))


_EvaluationPage = Annotated[PageRequest, Depends(keyed_by(EvaluationId.pattern()))]


@router.get("/{agent_id}/evaluations", response_model=EvaluationList)
async def list_evaluations(
    agent_id: str, page: _EvaluationPage, tenant: RunsReader, p: PlatformDep,
) -> EvaluationList:
    """List evaluations.

    The agent's evaluations, newest first."""
    agent = _agent(agent_id)
    await agents.get_agent(p.db, tenant, agent)  # 404 for another tenant's agent
    found = await service.list_for(p.db, tenant, agent,
                                   before=page.position(EvaluationId.parse), limit=page.limit)
    return page.answer(EvaluationList, found, _evaluation_summary,
                       key=lambda e: str(e.evaluation_id))


def _evaluation_summary(e: service.Evaluation) -> EvaluationSummaryOut:
    return EvaluationSummaryOut(
        evaluation_id=str(e.evaluation_id), test_set_id=str(e.test_set_id),
        baseline=SideSpecOut(version=e.baseline_version, model=None),
        candidate=SideSpecOut(version=e.candidate_version, model=e.candidate_model),
        cases=e.cases, created_by=e.created_by, created_at=e.created_at)


@router.get("/{agent_id}/evaluations/{evaluation_id}", response_model=EvaluationOut)
async def get_evaluation(
    agent_id: str, evaluation_id: str, tenant: RunsReader, p: PlatformDep,
) -> EvaluationOut:
    """Get an evaluation.

    Its report: each case's result on the candidate and the baseline, and whether the
    candidate may be promoted."""
    agent = _agent(agent_id)
    evaluation = parse_or_404(EvaluationId, evaluation_id, service.NOT_FOUND)
    return report_out(await service.report(p.db, tenant, agent, evaluation))


@router.post("/{agent_id}/promote", response_model=PromotionOut,
             responses={409: {"description": "`conflict`: the agent has no such version "
                                              "(`field`: version), no such evaluation "
                                              "(`field`: evaluation_id), or the evaluation "
                                              "named is not of this version, still running, "
                                              "or a case failed."}})
async def promote(
    agent_id: str, body: PromoteBody, who: AgentsManagerCaller, p: PlatformDep,
) -> PromotionOut:
    """Make a version the live one: what `POST /v1/runs` without a version runs. Publishing
    never does; only this, recorded with who and when."""
    tenant, by = who.tenant, str(who.key)
    agent = _agent(agent_id)
    latest = (await agents.get_agent(p.db, tenant, agent)).version
    if body.version > latest:
        raise Conflict(f"version: this agent has no version {body.version} (its "
                       f"latest is {latest})", field="version")
    evaluation = None
    if body.evaluation_id is not None:
        try:
            evaluation = EvaluationId.parse(body.evaluation_id)
            await service.require_passed(p.db, tenant, agent, evaluation, body.version)
        except (ValueError, NotFound):
            raise Conflict("evaluation_id: no evaluation of this agent with this id",
                           field="evaluation_id") from None
    done = await agents.promote(p.db, tenant, agent, body.version, by=by,
                                evaluation_id=evaluation.uuid if evaluation else None)
    return _promotion_out(agent, done)


@router.get("/{agent_id}/promotions", response_model=PromotionList)
async def list_promotions(agent_id: str, tenant: RunsReader, p: PlatformDep) -> PromotionList:
    """List promotions.

    Every time a version was made live, newest first: by whom, from which version, and on
    which evaluation."""
    agent = _agent(agent_id)
    await agents.get_agent(p.db, tenant, agent)
    return PromotionList(data=[_promotion_out(agent, x)
                               for x in await agents.promotions(p.db, tenant, agent)])


def _promotion_out(agent: AgentId, x: agents.Promotion) -> PromotionOut:
    return PromotionOut(
        promotion_id=str(x.promotion_id), agent_id=str(agent), version=x.version,
        previous_version=x.previous_version, promoted_by=x.promoted_by,
        evaluation_id=str(EvaluationId(x.evaluation_id)) if x.evaluation_id else None,
        promoted_at=x.promoted_at)


