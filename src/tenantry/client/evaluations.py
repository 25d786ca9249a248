"""The typed answers about test sets and evaluations (ADR 0034), read from the API's JSON as
the others are (models.py: ``raw`` keeps the JSON, times are aware UTC ``datetime`` values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenantry.client.models import Json, _time

__all__ = [
    "Evaluation",
    "EvaluationCase",
    "EvaluationCheck",
    "EvaluationSide",
    "EvaluationSpec",
    "EvaluationSummary",
    "EvaluationToolCall",
    "EvaluationTotals",
    "TestCase",
    "TestSet",
    "TestSetSummary",
]


@dataclass(frozen=True, slots=True)
class TestCase:
    """One case of a test set: its run's ``input``, what is checked (``checks``), the tool
    results recorded for it, and the run it was made from (``from_run``), if any."""

    __test__ = False  # not a pytest test class, whatever its name says

    name: str | None
    input: Any
    checks: Json
    recorded: tuple[Json, ...]
    from_run: str | None = None
    #: The run ``from_run`` names was deleted: what the case copied from it went with it
    #: (an evaluation of the test set is refused while it has such a case).
    from_run_deleted: bool = False

    @classmethod
    def from_json(cls, body: Json) -> TestCase:
        return cls(body.get("name"), body.get("input"), body.get("checks") or {},
                   tuple(body.get("recorded") or ()), body.get("from_run"),
                   bool(body.get("from_run_deleted", False)))


@dataclass(frozen=True, slots=True)
class TestSet:
    """An agent's test set: ``tool_results`` is ``recorded`` (no call reaches a tool
    server) or ``live``; ``stubs`` answer a tool's calls that no recording matches."""

    __test__ = False

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    stubs: Mapping[str, str]
    cases: tuple[TestCase, ...]
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> TestSet:
        return cls(str(body["test_set_id"]), str(body["agent_id"]), str(body["name"]),
                   str(body.get("tool_results", "recorded")), body.get("stubs") or {},
                   tuple(TestCase.from_json(c) for c in body.get("cases") or ()),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class TestSetSummary:
    """A test set as a list shows it: how many cases, not the cases
    (``get_test_set`` reads them)."""

    __test__ = False

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    cases: int
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> TestSetSummary:
        return cls(str(body["test_set_id"]), str(body["agent_id"]), str(body["name"]),
                   str(body.get("tool_results", "recorded")), int(body["cases"]),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class EvaluationSpec:
    """One side of an evaluation: a version, and the model run in place of its own."""

    version: int
    model: str | None

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSpec:
        return cls(int(body["version"]), body.get("model"))

    def __str__(self) -> str:
        return f"v{self.version}" + (f" with {self.model}" if self.model else "")


@dataclass(frozen=True, slots=True)
class EvaluationCheck:
    """One check of a case on one side: which (``answer_contains``, ...), and why it
    passed or failed."""

    check: str
    passed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class EvaluationToolCall:
    """A tool call of an evaluation's run; ``outcome``: ``recorded``, ``stub`` or
    ``no_recording`` when a stand-in answered it, None when it was made."""

    tool: str
    arguments: Any
    outcome: str | None


@dataclass(frozen=True, slots=True)
class EvaluationSide:
    """A case's run on one side. ``status`` None: the run was deleted (retention);
    ``passed`` None while it runs. The numbers are None for a deleted run. Once the run
    ended, ``tool_calls`` are its first calls (50) and ``tool_calls_total`` how many it
    made (None while it runs)."""

    run_id: str
    status: str | None
    passed: bool | None
    answer: Any
    error: Any
    checks: tuple[EvaluationCheck, ...]
    steps: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_micros: int | None
    latency_ms: float | None
    tool_calls: tuple[EvaluationToolCall, ...]
    tool_calls_total: int | None = None

    @property
    def tokens(self) -> int | None:
        """Input and output tokens together."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    @property
    def failed_checks(self) -> tuple[EvaluationCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSide:
        return cls(
            run_id=str(body["run_id"]), status=body.get("status"), passed=body.get("passed"),
            answer=body.get("answer"), error=body.get("error"),
            checks=tuple(EvaluationCheck(str(c["check"]), bool(c["passed"]),
                                         str(c.get("detail", "")))
                         for c in body.get("checks") or ()),
            steps=body.get("steps"), input_tokens=body.get("input_tokens"),
            output_tokens=body.get("output_tokens"), cost_micros=body.get("cost_micros"),
            latency_ms=body.get("latency_ms"),
            tool_calls=tuple(EvaluationToolCall(str(c["tool"]), c.get("arguments"),
                                                c.get("outcome"))
                             for c in body.get("tool_calls") or ()),
            tool_calls_total=body.get("tool_calls_total"))


@dataclass(frozen=True, slots=True)
class EvaluationCase:
    """One case of an evaluation, both sides; ``differences`` (once both ended): which of
    ``passed``, ``status``, ``answer``, ``tool_calls``, ``steps`` differ."""

    index: int
    name: str
    input: Any
    baseline: EvaluationSide
    candidate: EvaluationSide
    differences: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        """Passed on the baseline, failed on the candidate."""
        return self.baseline.passed is True and self.candidate.passed is False

    @classmethod
    def from_json(cls, body: Json) -> EvaluationCase:
        return cls(int(body["index"]), str(body["name"]), body.get("input"),
                   EvaluationSide.from_json(body["baseline"]),
                   EvaluationSide.from_json(body["candidate"]),
                   tuple(str(d) for d in body.get("differences") or ()))


@dataclass(frozen=True, slots=True)
class EvaluationTotals:
    """One side's sums over the cases (``running``: runs not ended yet)."""

    cases: int
    passed: int
    failed: int
    running: int
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    latency_ms: float

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_json(cls, body: Json) -> EvaluationTotals:
        return cls(int(body.get("cases", 0)), int(body.get("passed", 0)),
                   int(body.get("failed", 0)), int(body.get("running", 0)),
                   int(body.get("steps", 0)), int(body.get("input_tokens", 0)),
                   int(body.get("output_tokens", 0)), int(body.get("cost_micros", 0)),
                   float(body.get("latency_ms", 0.0)))


_NO_TOTALS = EvaluationTotals(0, 0, 0, 0, 0, 0, 0, 0, 0.0)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """An evaluation's report, read from its runs whenever it is asked for: ``status``
    ``running`` or ``finished``; ``passed`` (the candidate passed every case) None until
    every run ended."""

    evaluation_id: str
    agent_id: str
    test_set_id: str
    status: str
    passed: bool | None
    baseline: EvaluationSpec
    candidate: EvaluationSpec
    created_by: str
    created_at: datetime
    cases: tuple[EvaluationCase, ...]
    totals: Mapping[str, EvaluationTotals]  # "baseline" and "candidate"
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def baseline_totals(self) -> EvaluationTotals:
        return self.totals.get("baseline", _NO_TOTALS)

    @property
    def candidate_totals(self) -> EvaluationTotals:
        return self.totals.get("candidate", _NO_TOTALS)

    @classmethod
    def from_json(cls, body: Json) -> Evaluation:
        return cls(
            evaluation_id=str(body["evaluation_id"]), agent_id=str(body["agent_id"]),
            test_set_id=str(body["test_set_id"]), status=str(body["status"]),
            passed=body.get("passed"), baseline=EvaluationSpec.from_json(body["baseline"]),
            candidate=EvaluationSpec.from_json(body["candidate"]),
            created_by=str(body.get("created_by", "")), created_at=_time(body["created_at"]),
            cases=tuple(EvaluationCase.from_json(c) for c in body.get("cases") or ()),
            totals={side: EvaluationTotals.from_json(t)
                    for side, t in (body.get("totals") or {}).items()},
            raw=body)


@dataclass(frozen=True, slots=True)
class EvaluationSummary:
    """An item of ``evaluations.list`` (no results: ``evaluations.get`` reads them)."""

    evaluation_id: str
    test_set_id: str
    baseline: EvaluationSpec
    candidate: EvaluationSpec
    cases: int
    created_by: str
    created_at: datetime

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSummary:
        return cls(str(body["evaluation_id"]), str(body["test_set_id"]),
                   EvaluationSpec.from_json(body["baseline"]),
                   EvaluationSpec.from_json(body["candidate"]), int(body["cases"]),
                   str(body.get("created_by", "")), _time(body["created_at"]))
