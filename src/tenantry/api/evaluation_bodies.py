"""The bodies of the evaluations API (``api/evaluations.py``, ADR 0034): what a test set and
an evaluation take and what test sets and reports are answered as. The promotion's two
bodies stay beside their routes: the OpenAPI document names them by that module
(``api/model_snapshots.py`` has bodies of the same names)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from tenantry.api.agents import ToolName
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
from tenantry.evaluations import service, test_sets
from tenantry.evaluations.checks import PatternRefused, compile_pattern
from tenantry.ids import RunId

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


def test_set_out(t: test_sets.TestSet) -> TestSetOut:
    return TestSetOut(test_set_id=str(t.test_set_id), agent_id=str(t.agent_id), name=t.name,
                      tool_results=t.tool_results, stubs=t.stubs,
                      cases=[CaseOut(**case) for case in t.cases], created_at=t.created_at)


def side_out(side: service.SideResult) -> SideOut:
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


def totals_out(sides: list[service.SideResult]) -> TotalsOut:
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
                             baseline=side_out(c.baseline), candidate=side_out(c.candidate),
                             differences=c.differences) for c in r.cases],
        totals={"baseline": totals_out([c.baseline for c in r.cases]),
                "candidate": totals_out([c.candidate for c in r.cases])})
