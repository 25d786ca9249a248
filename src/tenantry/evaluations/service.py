"""Evaluations (ADR 0034): every case of a test set run on a baseline version and on a
candidate (another version, or a model in place of the version's), as ordinary runs of the
tenant — admitted, fair-scheduled at batch priority, billed, sandboxed — whose tool calls
are answered as the test set says (``tools/stand_ins.py``). The report is read from the
runs themselves; a side is judged once, at the first read after its run ended, and its
verdicts stored (deleted with the run, like the run's other state), so a deleted run shows
as deleted and polling a report never reads the runs' events again."""

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
ENDED = frozenset({"finished", "failed", "cancelled"})


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
    gone = test_set.cases_without_their_run()
    if gone:  # its input and recordings went with the run: not the case that was written
        raise Conflict(f"{len(gone)} case(s) of this test set were made from runs since "
                       f"deleted, and what they copied went with them: {', '.join(gone[:5])}. "
                       "Make a test set without them.", field="test_set_id",
                       cases_without_their_run=gone)
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
        return await _get_in(conn, tenant, agent, evaluation)


async def _get_in(conn: Connection, tenant: TenantId, agent: AgentId,
                  evaluation: EvaluationId) -> Evaluation:
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

#: Tool calls a report lists of one side: the first ones, with how many the run made.
REPORTED_TOOL_CALLS = 50
#: The SQLSTATE of a write to a tenant being moved to another cell (migration 0031).
_TENANT_MOVING = "TR020"


@dataclass(frozen=True, slots=True)
class SideResult:
    run_id: RunId
    # None: the run was deleted (retention). Its tool_calls: the first REPORTED_TOOL_CALLS,
    # once the run ended (none while it runs).
    outcome: RunOutcome | None
    verdicts: tuple[Verdict, ...]
    tool_calls_total: int | None = None  # once the run ended
    tool_calls_sha256: bytes | None = None  # of all of them: what `differences` compares

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
        if self.baseline.tool_calls_sha256 != self.candidate.tool_calls_sha256:
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
        return await _report(conn, tenant, await _get_in(conn, tenant, agent, evaluation))


async def report_for(db: Database, tenant: TenantId, evaluation: EvaluationId) -> Report:
    """The same report, found by the evaluation's id alone (within the tenant): for the
    operator console, which reaches it from one of its runs."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_evaluation_of_tenant, tenant.value, evaluation.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        return await _report(conn, tenant, _of(row))


@dataclass(frozen=True, slots=True)
class _Judged:
    """A side's verdicts and the calls it reports: computed once, then stored."""

    verdicts: tuple[Verdict, ...]
    tool_calls: tuple[ToolCall, ...]  # the first REPORTED_TOOL_CALLS
    tool_calls_total: int
    tool_calls_sha256: bytes

    @classmethod
    def stored(cls, row: asyncpg.Record) -> _Judged:
        return cls(tuple(Verdict(str(v["check"]), bool(v["passed"]), str(v["detail"]))
                         for v in row["verdicts"]),
                   tuple(ToolCall(str(c["tool"]), c.get("arguments"), c.get("outcome"))
                         for c in row["tool_calls"]),
                   row["tool_calls_total"], bytes(row["tool_calls_sha256"]))


async def _report(conn: Connection, tenant: TenantId, found: Evaluation) -> Report:
    """The report of ``found``, read in the caller's tenant transaction. A side whose run
    ended is judged once — its events read, its checks run — and stored; every later read
    takes the stored verdicts, so a report costs a few indexed rows per case whoever polls
    it, and a side still running reads none of its events."""
    evaluation = found.evaluation_id
    cases = {c["case_index"]: c for c in await conn.fetch(
        Q.report_cases, tenant.value, found.test_set_id.uuid)}
    runs = await conn.fetch(Q.evaluation_runs, tenant.value, evaluation.uuid)
    checks = {index: Checks.from_json(c["checks"] or {}) for index, c in cases.items()}
    judged = await _judge(conn, tenant, evaluation, checks,
                          [r for r in runs if r["status"] in ENDED and r["verdicts"] is None])
    sides: dict[tuple[int, str], SideResult] = {}
    for r in runs:
        run = RunId(r["run_id"])
        if r["status"] is None:  # deleted (retention): so are its stored verdicts
            sides[(r["case_index"], r["side"])] = SideResult(run, None, ())
            continue
        verdict = judged.get(r["run_id"]) or (
            _Judged.stored(r) if r["verdicts"] is not None else None)
        outcome = _outcome(r, verdict.tool_calls if verdict is not None else ())
        sides[(r["case_index"], r["side"])] = SideResult(
            run, outcome, verdict.verdicts if verdict is not None else (),
            verdict.tool_calls_total if verdict is not None else None,
            verdict.tool_calls_sha256 if verdict is not None else None)
    results = [CaseResult(index, case["name"] or f"case {index + 1}", case["input"],
                          sides[(index, "baseline")], sides[(index, "candidate")])
               for index, case in sorted(cases.items())
               if (index, "baseline") in sides and (index, "candidate") in sides]
    return Report(found, results)


def _outcome(r: asyncpg.Record, calls: tuple[ToolCall, ...]) -> RunOutcome:
    return RunOutcome(
        status=r["status"], answer=r["answer"], error=r["error"], steps=r["steps"],
        input_tokens=r["input_tokens"], output_tokens=r["output_tokens"],
        cost_micros=r["cost_micros"],
        latency_ms=None if r["latency_ms"] is None else round(float(r["latency_ms"]), 1),
        tool_calls=calls)


async def _judge(conn: Connection, tenant: TenantId, evaluation: EvaluationId,
                 checks: dict[int, Checks], ended: list[asyncpg.Record],
                 ) -> dict[uuid.UUID, _Judged]:
    """Judge the sides whose runs ended and have no stored verdicts (the first report
    after each ended): their calls read once, every check run on all of them, the result
    stored."""
    if not ended:
        return {}
    calls: dict[uuid.UUID, list[ToolCall]] = defaultdict(list)
    for c in await conn.fetch(Q.calls_to_judge, tenant.value, [r["run_id"] for r in ended]):
        calls[c["run_id"]].append(ToolCall(str(c["tool"] or ""), c["arguments"], c["outcome"]))
    judged: dict[uuid.UUID, _Judged] = {}
    for r in ended:
        made = tuple(calls[r["run_id"]])
        outcome = _outcome(r, made)
        judged[r["run_id"]] = _Judged(
            tuple(checks.get(r["case_index"], Checks()).verdicts(outcome)),
            made[:REPORTED_TOOL_CALLS], len(made),
            digest([[c.tool, c.arguments] for c in made]))
    try:
        # A savepoint: a tenant being moved refuses the write, and the report is served
        # all the same (judged again at a read after the move).
        async with conn.transaction():
            await conn.executemany(Q.store_result, [
                (tenant.value, r["run_id"], evaluation.uuid, r["status"],
                 all(v.passed for v in j.verdicts), [v.to_json() for v in j.verdicts],
                 [{"tool": c.tool, "arguments": c.arguments, "outcome": c.outcome}
                  for c in j.tool_calls], j.tool_calls_total, j.tool_calls_sha256)
                for r in ended for j in (judged[r["run_id"]],)])
    except asyncpg.PostgresError as exc:
        if exc.sqlstate != _TENANT_MOVING:
            raise
    return judged


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
