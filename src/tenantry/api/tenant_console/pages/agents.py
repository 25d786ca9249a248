"""The tenant's agents, and one agent: its versions (which is live), its evaluations'
results side by side (baseline and candidate, per version), its promotions, and a
*Promote* form per version.

Everything is read with the functions the API's ``/v1/agents`` routes use; a promotion is
the API's (``agents.promote``, after ``evaluations.require_passed`` when it names its
evidence), named as the person's (``user:<id>``) and recorded in the audit trail as an
account change. Only a role holding ``agents:manage`` sees the forms, and the POST checks
the scope again: a form forged by a viewer changes nothing."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.agents import service as agents
from tenantry.api.console.view import HEADERS, id_or_none
from tenantry.api.evaluation_bodies import report_out
from tenantry.api.tenant_console import changes
from tenantry.api.tenant_console.view import PREFIX, AgentsForm, RunsPage, text
from tenantry.errors import Conflict, NotFound
from tenantry.evaluations import service as evaluations
from tenantry.ids import AgentId, EvaluationId
from tenantry.tenants.scopes import Scope

router = APIRouter()
PAGE = 50
#: The newest versions an agent's page lists (and the live one, if older).
VERSIONS = 20
#: The newest evaluations an agent's page compares.
EVALUATIONS = 10
ROUTE = f"POST {PREFIX}/agents/{{agent_id}}/promote"  # the audit trail's action
_NOT_FOUND = "No agent with this id."
_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits: str.isdigit() takes "²" too


@router.get("/agents")
async def agents_list(v: RunsPage) -> Response:
    before = id_or_none(AgentId, v.request.query_params.get("before"))
    rows = await agents.list_agents(v.db, v.member.tenant, before=before, limit=PAGE)
    older = f"{PREFIX}/agents?before={rows[-1].agent_id}" if len(rows) == PAGE else None
    return v.render("agents.html", title="Agents", rows=rows, older=older)


@router.get("/agents/{agent_id}")
async def agent_page(agent_id: str, v: RunsPage) -> Response:
    tenant = v.member.tenant  # only ever the signed-in person's: another's is not found
    try:
        agent = AgentId.parse(agent_id)
        latest = await agents.get_agent(v.db, tenant, agent)
    except (ValueError, NotFound):
        return v.not_found(_NOT_FOUND)
    numbers = list(range(latest.version, max(0, latest.version - VERSIONS), -1))
    if latest.live_version not in numbers:
        numbers.append(latest.live_version)
    versions = [await agents.get_version(v.db, tenant, agent, n) for n in numbers]
    found = await evaluations.list_for(v.db, tenant, agent, limit=EVALUATIONS)
    # The API's own report of each (GET …/evaluations/{id}): the page shows what it reads.
    reports = [report_out(await evaluations.report(v.db, tenant, agent, e.evaluation_id))
               for e in found]
    q = v.request.query_params
    promoted = q.get("promoted") if _NUMBER.fullmatch(q.get("promoted", "")) else None
    return v.render("agent.html", title=f"Agent {latest.name}", agent=latest,
                    versions=versions, hidden=latest.version - len(numbers),
                    evaluations=reports,
                    promotions=[(x, str(EvaluationId(x.evaluation_id)) if x.evaluation_id
                                  else None)
                                 for x in await agents.promotions(v.db, tenant, agent,
                                                                  limit=10)],
                    promote=v.may(Scope.AGENTS_MANAGE), promoted=promoted)


@router.post("/agents/{agent_id}/promote")
async def promote(agent_id: str, v: AgentsForm) -> Response:
    form = await v.request.form()
    tenant = v.member.tenant
    try:
        agent = AgentId.parse(agent_id)
        await agents.get_agent(v.db, tenant, agent)  # another tenant's: not found
    except (ValueError, NotFound):
        return v.not_found(_NOT_FOUND)
    version = text(form.get("version"))
    if not _NUMBER.fullmatch(version) or not 0 < int(version) < 2**31:
        return v.error(400, "Choose a version", "The form named no version.")
    number = int(version)
    evaluation = None
    if given := text(form.get("evaluation_id")):
        try:
            evaluation = EvaluationId.parse(given)
            await evaluations.require_passed(v.db, tenant, agent, evaluation, number)
        except (ValueError, NotFound):
            return v.error(409, "Not promoted", "No evaluation of this agent with this id.")
        except Conflict as exc:
            return v.error(409, "Not promoted", exc.detail)
    try:
        await agents.promote(v.db, tenant, agent, number, by=v.member.actor,
                             evaluation_id=evaluation.uuid if evaluation else None)
    except NotFound as exc:
        return v.error(409, "Not promoted", exc.detail)
    await changes.record(v, ROUTE)
    return RedirectResponse(f"{PREFIX}/agents/{agent}?" + urlencode({"promoted": number}),
                            status_code=303, headers=HEADERS)
