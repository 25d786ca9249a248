"""Evaluations (ADR 0034): every case of a test set run on a baseline version and on a
candidate (another version, or a model in place of the version's), as ordinary runs of the
tenant — admitted, fair-scheduled at batch priority, billed, sandboxed — whose tool calls
are answered as the test set says (``tools/stand_ins.py``). The report is read from the
runs themselves whenever it is asked for: nothing is copied, so it is never stale, and a
run deleted by retention shows as deleted."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.agents import service as agents
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.evaluations.checks import Checks, RunOutcome, ToolCall, Verdict
from tenantry.evaluations.test_sets import TestSet
from tenantry.ids import AgentId, EvaluationId, RunId, TenantId, TestSetId
from tenantry.jsonutil import digest
from tenantry.runs.service import RunRequest, create_run_in

Q = load(__package__)

NOT_FOUND = "No evaluation with this id for this agent."
SIDES = ("baseline", "candidate")
#: Evaluation runs wait behind the tenant's interactive work (the fair claim's classes).
PRIORITY = "batch"


@dataclass(frozen=True, slots=True)
class Evaluation:
    evaluation_id: EvaluationId
    agent_id: AgentId
    test_set_id: TestSetId
    baseline_version: int
    candidate_version: int
    candidate_model: str | None
    cases: int
    created_by: str
    created_at: datetime


async def start(db: Database, tenant: TenantId, agent: AgentId, test_set: TestSet, *,
                baseline: int, candidate: int, candidate_model: str | None,
                by: str) -> Evaluation:
    """Create the evaluation and its runs in one transaction: all of them or none (the
    tenant's admission applies to each run; one refused refuses the evaluation)."""
    evaluation = EvaluationId.new()
    async with db.tenant_tx(tenant) as conn:
        versions = {side: await agents.get_version(db, tenant, agent, number, conn)
                    for side, number in (("baseline", baseline), ("candidate", candidate))}
        for side, found in versions.items():
            if found.spec.children or any(t.startswith("activity:") for t in found.spec.tools):
                raise Conflict(f"The {side} version starts child runs or activities; "
                               "evaluations of such agents are not supported yet.",
                               field=side)
        created = await conn.fetchval(
            Q.insert_evaluation, tenant.value, evaluation.uuid, agent.uuid,
            test_set.test_set_id.uuid, baseline, candidate, candidate_model,
            len(test_set.cases), by)
        for index, case in enumerate(test_set.cases):
            for side in SIDES:
                version = baseline if side == "baseline" else candidate
                model = candidate_model if side == "candidate" else None
                key = f"{evaluation}:{index}:{side}"
                request = RunRequest(
                    agent_id=agent, version=version, input=case.get("input"),
                    webhook_url=None, priority=PRIORITY, idempotency_key=key,
                    request_sha256=digest({"evaluation": str(evaluation), "case": index,
                                           "side": side}),
                    evaluation_id=str(evaluation), model_override=model)
                run = await create_run_in(conn, db, tenant, request, kind="agent")
                await conn.execute(Q.insert_evaluation_run, tenant.value, evaluation.uuid,
                                   index, side, run.run_id.uuid)
    return Evaluation(evaluation, agent, test_set.test_set_id, baseline, candidate,
                      candidate_model, len(test_set.cases), by, created)


async def get(db: Database, tenant: TenantId, agent: AgentId,
              evaluation: EvaluationId) -> Evaluation:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_evaluation, tenant.value, agent.uuid, evaluation.uuid)
    if row is None:
        raise NotFound(NOT_FOUND)
    return _of(row)


async def list_for(db: Database, tenant: TenantId, agent: AgentId, *,
                   before: EvaluationId | None = None, limit: int = 50) -> list[Evaluation]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_evaluations, tenant.value, agent.uuid,
                                before.uuid if before else None, limit)
    return [_of(r) for r in rows]


def _of(row: asyncpg.Record) -> Evaluation:
    return Evaluation(EvaluationId(row["evaluation_id"]), AgentId(row["agent_id"]),
                      TestSetId(row["test_set_id"]), row["baseline_version"],
                      row["candidate_version"], row["candidate_model"], row["cases"],
                      row["created_by"], row["created_at"])


# -- the report ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SideResult:
    run_id: RunId
    outcome: RunOutcome | None  # None: the run was deleted (retention)
    verdicts: tuple[Verdict, ...]

    @property
    def passed(self) -> bool | None:
        """None while the run goes on (or when it was deleted)."""
        if self.outcome is None or not self.outcome.ended:
            return None
        return all(v.passed for v in self.verdicts)


@dataclass(frozen=True, slots=True)
class CaseResult:
    index: int
    name: str
    input: Any
    baseline: SideResult
    candidate: SideResult

    @property
    def differences(self) -> list[str]:
        """What differs between the two sides, once both ended."""
        a, b = self.baseline.outcome, self.candidate.outcome
        if a is None or b is None or not (a.ended and b.ended):
            return []
        found = []
        if self.baseline.passed != self.candidate.passed:
            found.append("passed")
        if a.status != b.status:
            found.append("status")
        if a.answer_text != b.answer_text:
            found.append("answer")
        if [(c.tool, c.arguments) for c in a.tool_calls] != [
                (c.tool, c.arguments) for c in b.tool_calls]:
            found.append("tool_calls")
        if a.steps != b.steps:
            found.append("steps")
        return found


@dataclass(frozen=True, slots=True)
class Report:
    evaluation: Evaluation
    cases: list[CaseResult]

    @property
    def finished(self) -> bool:
        return all(side.outcome is None or side.outcome.ended
                   for case in self.cases for side in (case.baseline, case.candidate))

    @property
    def passed(self) -> bool | None:
        """Every case passed on the candidate (None until every run ended)."""
        if not self.finished:
            return None
        return all(case.candidate.passed for case in self.cases)


async def report(db: Database, tenant: TenantId, agent: AgentId,
                 evaluation: EvaluationId) -> Report:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_evaluation, tenant.value, agent.uuid, evaluation.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        return await _report(conn, tenant, _of(row))


async def report_for(db: Database, tenant: TenantId, evaluation: EvaluationId) -> Report:
    """The same report, found by the evaluation's id alone (within the tenant): for the
    operator console, which reaches it from one of its runs."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_evaluation_of_tenant, tenant.value, evaluation.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        return await _report(conn, tenant, _of(row))


async def _report(conn: Connection, tenant: TenantId, found: Evaluation) -> Report:
    """The report of ``found``, read in the caller's tenant transaction."""
    evaluation = found.evaluation_id
    test_set = await conn.fetchrow(Q.get_test_set, tenant.value, found.agent_id.uuid,
                                   found.test_set_id.uuid)
    runs = await conn.fetch(Q.evaluation_runs, tenant.value, evaluation.uuid)
    calls: dict[uuid.UUID, list[ToolCall]] = defaultdict(list)
    for event in await conn.fetch(Q.tool_calls_of_runs, tenant.value,
                                  [r["run_id"] for r in runs]):
        data = event["data"]
        calls[event["run_id"]].append(
            ToolCall(str(data.get("tool", "")), data.get("arguments"), data.get("outcome")))
    cases = list(test_set["cases"]) if test_set is not None else []
    sides: dict[tuple[int, str], SideResult] = {}
    for r in runs:
        case = cases[r["case_index"]] if r["case_index"] < len(cases) else {}
        outcome = None if r["status"] is None else RunOutcome(
            status=r["status"], answer=r["answer"], error=r["error"], steps=r["steps"],
            input_tokens=r["input_tokens"], output_tokens=r["output_tokens"],
            cost_micros=r["cost_micros"],
            latency_ms=None if r["latency_ms"] is None else round(float(r["latency_ms"]), 1),
            tool_calls=tuple(calls[r["run_id"]]))
        verdicts = (tuple(Checks.from_json(case.get("checks") or {}).verdicts(outcome))
                    if outcome is not None and outcome.ended else ())
        sides[(r["case_index"], r["side"])] = SideResult(RunId(r["run_id"]), outcome, verdicts)
    results = [CaseResult(index, str(case.get("name") or f"case {index + 1}"),
                          case.get("input"), sides[(index, "baseline")],
                          sides[(index, "candidate")])
               for index, case in enumerate(cases)
               if (index, "baseline") in sides and (index, "candidate") in sides]
    return Report(found, results)


async def require_passed(db: Database, tenant: TenantId, agent: AgentId,
                         evaluation: EvaluationId, version: int) -> None:
    """A promotion that asks for evidence: the evaluation is of this agent, its candidate is
    ``version`` as published (no model in its place), it has ended, and the candidate
    passed every case. Otherwise 409, saying which."""
    found = await report(db, tenant, agent, evaluation)
    e = found.evaluation
    if e.candidate_version != version or e.candidate_model is not None:
        raise Conflict(f"Evaluation {evaluation} is of version {e.candidate_version}"
                       + (f" with model {e.candidate_model}" if e.candidate_model else "")
                       + f", not of version {version} as published.", field="evaluation_id")
    if not found.finished:
        raise Conflict(f"Evaluation {evaluation} is still running.", field="evaluation_id")
    failing = [c.name for c in found.cases if not c.candidate.passed]
    if failing:
        raise Conflict(f"Version {version} failed {len(failing)} case(s) of evaluation "
                       f"{evaluation}: {', '.join(failing[:5])}.", field="evaluation_id",
                       failed_cases=failing)
