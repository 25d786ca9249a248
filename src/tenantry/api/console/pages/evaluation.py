"""One evaluation of an agent (ADR 0034), side by side: per case, the baseline's and the
candidate's runs — pass/fail, answers, failed checks, usage, tool calls and how each was
answered — with what differs, and totals; each side links its run's page."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console.view import PREFIX, SignedInPage
from tenantry.api.evaluation_bodies import report_out
from tenantry.errors import NotFound
from tenantry.evaluations import service
from tenantry.ids import EvaluationId, TenantId

router = APIRouter()


@router.get("/evaluations/{tenant_id}/{evaluation_id}")
async def evaluation_page(tenant_id: str, evaluation_id: str, v: SignedInPage) -> Response:
    try:
        tenant, evaluation = TenantId.parse(tenant_id), EvaluationId.parse(evaluation_id)
        found = await service.report_for(v.db, tenant, evaluation)
    except (ValueError, NotFound):
        return v.not_found("No evaluation with this id.")
    # The API's own report: the console shows exactly what the tenant reads.
    report = report_out(found)
    return v.render("evaluation.html", title=f"Evaluation {evaluation}", tenant=tenant,
                    e=report, regressed=[c.index for c in report.cases
                                         if c.baseline.passed is True
                                         and c.candidate.passed is False],
                    prefix=PREFIX)
