"""Tenant API: an agent's test sets, evaluations of a candidate against a baseline, and
promotion of a version to live (ADR 0034). The platform runs the cases and checks what
can be checked mechanically; whether a version goes live is the tenant's act."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from tenantry.agents import service as agents
from tenantry.api.agents import ToolName
from tenantry.api.auth import Caller, current_caller, current_tenant, platform
from tenantry.api.fields import (
    Body,
    PositiveInt4,
    StoredJson,
    StoredJsonObject,
    Text,
    bounded_json,
    exactly_one_given,
    one_or_more_given,
    storable_json,
)
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.api.runs import _OVERLOADED
from tenantry.errors import Conflict, NotFound
from tenantry.evaluations import service, test_sets
from tenantry.evaluations.checks import PatternRefused, compile_pattern
from tenantry.ids import AgentId, EvaluationId, RunId, TenantId, TestSetId

router = APIRouter(prefix="/v1/agents", tags=["evaluations"])

MAX_CASES = 100
MAX_INPUT_BYTES = 64 * 1024
MAX_RESULT_CHARS = 100_000
Needle = Annotated[Text, Field(min_length=1, max_length=1000)]


def _json(value: JsonValue, where: str) -> JsonValue:
    return bounded_json(value, where, MAX_INPUT_BYTES)


class ToolWithBody(Body):
    tool: ToolName
    arguments: StoredJsonObject = Field(
        default_factory=dict, description="Every key given must be in the call's arguments "
                                          "with an equal value (others may be there too).")

    @field_validator("arguments")
    @classmethod
    def _storable(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        storable_json(value, "arguments")
        return value


class ChecksBody(Body):
    """What the platform checks on a case's run, mechanically: no model grades anything."""

    finished: bool = Field(default=True, description="The run ended `finished` without an "
                                                     "error (on unless set to false).")
    answer_contains: list[Needle] = Field(default_factory=list, max_length=20)
    answer_not_contains: list[Needle] = Field(default_factory=list, max_length=20)
    answer_matches: Annotated[Text, Field(min_length=1, max_length=500)] | None = Field(
        default=None, description="A regular expression in RE2's syntax (Python's, without "
                                  "look-arounds or backreferences), searched anywhere in the "
                                  "answer in linear time.")
    answer_equals_json: StoredJson = Field(
        default=None, description="The answer, read as JSON, equals this value (set it to "
                                  "check; null is a value too once given).")
    tools_called: list[ToolName] = Field(default_factory=list, max_length=20)
    tools_not_called: list[ToolName] = Field(default_factory=list, max_length=20)
    tool_called_with: list[ToolWithBody] = Field(default_factory=list, max_length=20)
    max_steps: int | None = Field(default=None, ge=1, le=10_000)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000_000)
    max_cost_micros: int | None = Field(default=None, ge=0, le=10**12)

    @field_validator("answer_matches")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compile_pattern(value)
            except PatternRefused as exc:
                raise ValueError(f"answer_matches is not a pattern RE2 accepts: {exc}") \
                    from None
        return value

    @field_validator("answer_equals_json")
    @classmethod
    def _storable(cls, value: JsonValue) -> JsonValue:
        return _json(value, "answer_equals_json")

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump(exclude_defaults=True)
        out.pop("answer_equals_json", None)
        if "answer_equals_json" in self.model_fields_set:
            out["answer_equals_json"] = self.answer_equals_json
        if not self.finished:
            out["finished"] = False
        return out


class RecordedBody(Body):
    """What the tool returned for these arguments (give `result` or `error`)."""

    model_config = ConfigDict(json_schema_extra=exactly_one_given("result", "error"))

    tool: ToolName
    arguments: StoredJsonObject = Field(default_factory=dict)
    result: Annotated[Text, Field(max_length=MAX_RESULT_CHARS)] | None = None
    error: Annotated[Text, Field(min_length=1, max_length=MAX_RESULT_CHARS)] | None = None

    @field_validator("arguments")
    @classmethod
    def _storable(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        _json(value, "arguments")
        return value

    @model_validator(mode="after")
    def _one(self) -> RecordedBody:
        if (self.result is None) == (self.error is None):
            raise ValueError("give exactly one of result or error")
        return self


class CaseBody(Body):
    model_config = ConfigDict(json_schema_extra=one_or_more_given("input", "from_run"))

    name: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    input: StoredJson = Field(default=None, description="The run's input (any JSON but null, "
                                                       "at most 64 KiB); with `from_run`, "
                                                       "that run's input when omitted.")
    checks: ChecksBody = Field(default_factory=ChecksBody)
    recorded: list[RecordedBody] = Field(default_factory=list, max_length=100)
    from_run: Annotated[str, Field(pattern=RunId.pattern())] | None = Field(
        default=None, description="A finished run of this agent: its input (unless `input` "
                                  "is given) and every result its tool calls got are "
                                  "recorded in the case.")

    @field_validator("input")
    @classmethod
    def _storable(cls, value: JsonValue) -> JsonValue:
        return _json(value, "input")

    @model_validator(mode="after")
    def _has_input(self) -> CaseBody:
        if self.input is None and self.from_run is None:
            raise ValueError("a case needs an input (or from_run)")
        return self

    def to_json(self) -> dict[str, Any]:
        case: dict[str, Any] = {"checks": self.checks.to_json(),
                                "recorded": [r.model_dump(exclude_none=True)
                                             for r in self.recorded]}
        if self.name is not None:
            case["name"] = self.name
        if self.input is not None:
            case["input"] = self.input
        if self.from_run is not None:
            case["from_run"] = self.from_run
        return case


class CreateTestSet(Body):
    name: Annotated[Text, Field(min_length=1, max_length=200)]
    cases: list[CaseBody] = Field(min_length=1, max_length=MAX_CASES)
    tool_results: Literal["recorded", "live"] = Field(
        default="recorded",
        description="`recorded` (default): no call of an evaluation's runs is made — to a "
                    "tool server or to a built-in tool (code, files, browser); each is "
                    "answered by the case's recorded result for exactly that tool and those "
                    "arguments, else the tool's stub, else a tool error. `live`: calls to "
                    "servers that honour idempotency keys are made for real, and built-in "
                    "calls of an agent whose sandbox reaches no host and has no browser; "
                    "every other call is still answered that way.")
    stubs: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:@/-]{1,200}$")],
                Annotated[Text, Field(max_length=MAX_RESULT_CHARS)]] = Field(
        default_factory=dict, max_length=64,
        description="tool → the result every call of it gets when no recording matches.")


class CaseOut(BaseModel):
    name: str | None = None
    input: Any = None
    checks: dict[str, Any]
    recorded: list[dict[str, Any]]
    from_run: str | None = None
    from_run_deleted: bool = Field(
        default=False, description="The run `from_run` names was deleted (retention, "
                                   "`DELETE /v1/runs/{run_id}`, erasure): what the case "
                                   "copied from it — its input, unless the case has its "
                                   "own, and its tool results — went with it. An evaluation "
                                   "of this test set is refused (409) while it has such a "
                                   "case.")


class TestSetOut(BaseModel):
    __test__ = False  # not a pytest test class, whatever its name says

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    stubs: dict[str, str]
    cases: list[CaseOut]
    created_at: datetime


class TestSetSummaryOut(BaseModel):
    __test__ = False

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    cases: int = Field(description="How many cases it has (`GET …/test-sets/{test_set_id}` "
                                   "shows them).")
    created_at: datetime


class TestSetList(BaseModel):
    __test__ = False

    data: list[TestSetSummaryOut]
    next_cursor: str | None


class SideBody(Body):
    version: PositiveInt4 | None = Field(
        default=None, description="Default: the agent's live version (baseline), or the "
                                  "baseline's version (candidate, with a model).")


class CandidateBody(SideBody):
    model_config = ConfigDict(json_schema_extra=one_or_more_given("version", "model"))

    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="Run the candidate version with this model in place of "
                                  "its own (a new model before it goes live).")


class CreateEvaluation(Body):
    test_set_id: Annotated[str, Field(min_length=1, max_length=64)]
    candidate: CandidateBody
    baseline: SideBody = Field(default_factory=SideBody)

    @model_validator(mode="after")
    def _something_to_compare(self) -> CreateEvaluation:
        if self.candidate.version is None and self.candidate.model is None:
            raise ValueError("candidate needs a version or a model")
        return self


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
    promoted_by: str = Field(description="The id of the API key that promoted it.")
    evaluation_id: str | None
    promoted_at: datetime


class PromotionList(BaseModel):
    data: list[PromotionOut]


class ToolCallOut(BaseModel):
    tool: str
    arguments: Any
    outcome: str | None = Field(description="`recorded`, `stub`, `no_recording`: answered "
                                            "without the tool (ADR 0034); null: made.")


class VerdictOut(BaseModel):
    check: str
    passed: bool
    detail: str


class SideOut(BaseModel):
    run_id: str
    status: str | None = Field(description="null: the run was deleted (retention).")
    passed: bool | None = Field(description="Every check passed; null while it runs.")
    answer: Any = None
    error: Any = None
    checks: list[VerdictOut]
    steps: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_micros: int | None = None
    latency_ms: float | None = None
    tool_calls: list[ToolCallOut] = Field(
        default_factory=list,
        description=f"The run's first {service.REPORTED_TOOL_CALLS} tool calls, once it "
                    "ended (none while it runs).")
    tool_calls_total: int | None = Field(
        default=None, description="How many tool calls the run made, once it ended "
                                  "(`checks` judged them all); null while it runs.")


class CaseResultOut(BaseModel):
    index: int
    name: str
    input: Any
    baseline: SideOut
    candidate: SideOut
    differences: list[str] = Field(description="What differs once both ended: passed, "
                                               "status, answer, tool_calls, steps.")


class TotalsOut(BaseModel):
    cases: int
    passed: int
    failed: int
    running: int
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    latency_ms: float


class SideSpecOut(BaseModel):
    version: int
    model: str | None = Field(description="The model in place of the version's, if any.")


class EvaluationOut(BaseModel):
    evaluation_id: str
    agent_id: str
    test_set_id: str
    status: Literal["running", "finished"]
    passed: bool | None = Field(description="The candidate passed every case; null until "
                                            "every run ended.")
    baseline: SideSpecOut
    candidate: SideSpecOut
    created_by: str
    created_at: datetime
    cases: list[CaseResultOut]
    totals: dict[str, TotalsOut]


class EvaluationSummaryOut(BaseModel):
    evaluation_id: str
    test_set_id: str
    baseline: SideSpecOut
    candidate: SideSpecOut
    cases: int
    created_by: str
    created_at: datetime


class EvaluationList(BaseModel):
    data: list[EvaluationSummaryOut]
    next_cursor: str | None


AGENT_NOT_FOUND = agents.NOT_FOUND


def _test_set_out(t: test_sets.TestSet) -> TestSetOut:
    return TestSetOut(test_set_id=str(t.test_set_id), agent_id=str(t.agent_id), name=t.name,
                      tool_results=t.tool_results, stubs=t.stubs,
                      cases=[CaseOut(**case) for case in t.cases], created_at=t.created_at)


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
    agent_id: str, body: CreateTestSet, response: Response,
    tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> TestSetOut:
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    created = await test_sets.create(p.db, tenant, agent, body.name,
                                     tool_results=body.tool_results, stubs=body.stubs,
                                     cases=[case.to_json() for case in body.cases])
    response.headers["Location"] = f"/v1/agents/{agent}/test-sets/{created.test_set_id}"
    return _test_set_out(created)


@router.get("/{agent_id}/test-sets", response_model=TestSetList)
async def list_test_sets(
    agent_id: str, page: PageRequest = Depends(keyed_by(TestSetId.pattern())),
    tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> TestSetList:
    """A page of the agent's test sets, newest first: each one's name, tool results and how
    many cases it has, never the cases (read one test set to see them)."""
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    found = await test_sets.list_for(p.db, tenant, agent, before=page.position(TestSetId.parse),
                                     limit=page.limit)
    return TestSetList(
        data=[TestSetSummaryOut(test_set_id=str(t.test_set_id), agent_id=str(t.agent_id),
                                name=t.name, tool_results=t.tool_results, cases=t.cases,
                                created_at=t.created_at) for t in found],
        next_cursor=page.next_cursor(found, lambda t: str(t.test_set_id)))


@router.get("/{agent_id}/test-sets/{test_set_id}", response_model=TestSetOut)
async def get_test_set(
    agent_id: str, test_set_id: str,
    tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> TestSetOut:
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    found = parse_or_404(TestSetId, test_set_id, test_sets.NOT_FOUND)
    return _test_set_out(await test_sets.get(p.db, tenant, agent, found))


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
                 503: _OVERLOADED})
async def create_evaluation(
    agent_id: str, body: CreateEvaluation, response: Response,
    who: Caller = Depends(current_caller), p: Platform = Depends(platform),
) -> EvaluationOut:
    tenant, by = who.tenant, str(who.key)
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
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


@router.get("/{agent_id}/evaluations", response_model=EvaluationList)
async def list_evaluations(
    agent_id: str, page: PageRequest = Depends(keyed_by(EvaluationId.pattern())),
    tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> EvaluationList:
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    await agents.get_agent(p.db, tenant, agent)  # 404 for another tenant's agent
    found = await service.list_for(p.db, tenant, agent,
                                   before=page.position(EvaluationId.parse), limit=page.limit)
    return EvaluationList(
        data=[EvaluationSummaryOut(
            evaluation_id=str(e.evaluation_id), test_set_id=str(e.test_set_id),
            baseline=SideSpecOut(version=e.baseline_version, model=None),
            candidate=SideSpecOut(version=e.candidate_version, model=e.candidate_model),
            cases=e.cases, created_by=e.created_by, created_at=e.created_at) for e in found],
        next_cursor=page.next_cursor(found, lambda e: str(e.evaluation_id)))


@router.get("/{agent_id}/evaluations/{evaluation_id}", response_model=EvaluationOut)
async def get_evaluation(
    agent_id: str, evaluation_id: str,
    tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> EvaluationOut:
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    evaluation = parse_or_404(EvaluationId, evaluation_id, service.NOT_FOUND)
    return report_out(await service.report(p.db, tenant, agent, evaluation))


@router.post("/{agent_id}/promote", response_model=PromotionOut,
             responses={409: {"description": "`conflict`: the agent has no such version "
                                              "(`field`: version), no such evaluation "
                                              "(`field`: evaluation_id), or the evaluation "
                                              "named is not of this version, still running, "
                                              "or a case failed."}})
async def promote(
    agent_id: str, body: PromoteBody,
    who: Caller = Depends(current_caller), p: Platform = Depends(platform),
) -> PromotionOut:
    """Make a version the live one: what `POST /v1/runs` without a version runs. Publishing
    never does; only this, recorded with who and when."""
    tenant, by = who.tenant, str(who.key)
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
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
async def list_promotions(
    agent_id: str, tenant: TenantId = Depends(current_tenant), p: Platform = Depends(platform),
) -> PromotionList:
    agent = parse_or_404(AgentId, agent_id, AGENT_NOT_FOUND)
    await agents.get_agent(p.db, tenant, agent)
    return PromotionList(data=[_promotion_out(agent, x)
                               for x in await agents.promotions(p.db, tenant, agent)])


def _promotion_out(agent: AgentId, x: agents.Promotion) -> PromotionOut:
    return PromotionOut(
        promotion_id=str(x.promotion_id), agent_id=str(agent), version=x.version,
        previous_version=x.previous_version, promoted_by=x.promoted_by,
        evaluation_id=str(EvaluationId(x.evaluation_id)) if x.evaluation_id else None,
        promoted_at=x.promoted_at)


def _side_out(side: service.SideResult) -> SideOut:
    o = side.outcome
    verdicts = [VerdictOut(**v.to_json()) for v in side.verdicts]
    if o is None:
        return SideOut(run_id=str(side.run_id), status=None, passed=None, checks=verdicts)
    return SideOut(
        run_id=str(side.run_id), status=o.status, passed=side.passed, answer=o.answer,
        error=o.error, checks=verdicts, steps=o.steps, input_tokens=o.input_tokens,
        output_tokens=o.output_tokens, cost_micros=o.cost_micros, latency_ms=o.latency_ms,
        tool_calls=[ToolCallOut(tool=c.tool, arguments=c.arguments, outcome=c.outcome)
                    for c in o.tool_calls], tool_calls_total=side.tool_calls_total)


def _totals(sides: list[service.SideResult]) -> TotalsOut:
    done = [s for s in sides if s.outcome is not None]
    return TotalsOut(
        cases=len(sides), passed=sum(1 for s in sides if s.passed is True),
        failed=sum(1 for s in sides if s.passed is False),
        running=sum(1 for s in sides if s.outcome is not None and not s.outcome.ended),
        steps=sum(s.outcome.steps for s in done if s.outcome),
        input_tokens=sum(s.outcome.input_tokens for s in done if s.outcome),
        output_tokens=sum(s.outcome.output_tokens for s in done if s.outcome),
        cost_micros=sum(s.outcome.cost_micros for s in done if s.outcome),
        latency_ms=round(sum(s.outcome.latency_ms or 0.0 for s in done if s.outcome), 1))


def report_out(r: service.Report) -> EvaluationOut:
    e = r.evaluation
    return EvaluationOut(
        evaluation_id=str(e.evaluation_id), agent_id=str(e.agent_id),
        test_set_id=str(e.test_set_id), status="finished" if r.finished else "running",
        passed=r.passed,
        baseline=SideSpecOut(version=e.baseline_version, model=None),
        candidate=SideSpecOut(version=e.candidate_version, model=e.candidate_model),
        created_by=e.created_by, created_at=e.created_at,
        cases=[CaseResultOut(index=c.index, name=c.name, input=c.input,
                             baseline=_side_out(c.baseline), candidate=_side_out(c.candidate),
                             differences=c.differences) for c in r.cases],
        totals={"baseline": _totals([c.baseline for c in r.cases]),
                "candidate": _totals([c.candidate for c in r.cases])})
