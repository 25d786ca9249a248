"""The checks a test case may ask for, and their verdicts on one run (ADR 0034).

Every check is mechanical: the platform compares what a run did with what the case says,
and never asks a model whether an answer is good. A tenant that wants a graded verdict
adds its own grader (an activity, or a tool its agent calls) and checks what that returns.

``answer_matches`` is a tenant's pattern run against a run's answer wherever a report is
read (the API, the console, the SDK's wait): it is matched by RE2, whose time is linear in
the answer's length, never by Python's backtracking ``re``, where ``(a+)+b`` against forty
characters holds the event loop, and every tenant's requests behind it, for days.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import re2

from tenantry.jsonutil import canonical

#: RE2's memory for one compiled pattern: its own default (8 MiB), stated, so a pattern whose
#: program would be larger (nested counted repeats) is refused when it is written.
PATTERN_MAX_MEM = 8 << 20


class PatternRefused(ValueError):
    """A pattern RE2 does not accept (a look-around, a backreference, a program too large)."""


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (searched anywhere, Python's syntax where RE2 shares it).
    Raises :class:`PatternRefused` with RE2's reason."""
    options = re2.Options()
    options.max_mem = PATTERN_MAX_MEM
    options.log_errors = False  # the reason goes to the caller, not to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternRefused(str(reason)) from None


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any] | None
    outcome: str | None = None  # recorded, stub, no_recording (a stand-in answered); None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one run did, as the checks read it."""

    status: str
    answer: Any
    error: Any
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    latency_ms: float | None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "failed", "cancelled")

    @property
    def answer_text(self) -> str:
        if self.answer is None:
            return ""
        return self.answer if isinstance(self.answer, str) else orjson.dumps(self.answer).decode()


@dataclass(frozen=True, slots=True)
class Verdict:
    check: str
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Checks:
    """A case's checks; each one set is checked, the rest ignored. ``finished`` (on by
    default): the run ended ``finished``, with no error."""

    finished: bool = True
    answer_contains: tuple[str, ...] = ()
    answer_not_contains: tuple[str, ...] = ()
    answer_matches: str | None = None
    answer_equals_json: Any = field(default=None)
    answer_equals_json_set: bool = False
    tools_called: tuple[str, ...] = ()
    tools_not_called: tuple[str, ...] = ()
    tool_called_with: tuple[tuple[str, dict[str, Any]], ...] = ()
    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost_micros: int | None = None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Checks:
        return cls(
            finished=bool(value.get("finished", True)),
            answer_contains=tuple(value.get("answer_contains") or ()),
            answer_not_contains=tuple(value.get("answer_not_contains") or ()),
            answer_matches=value.get("answer_matches"),
            answer_equals_json=value.get("answer_equals_json"),
            answer_equals_json_set="answer_equals_json" in value,
            tools_called=tuple(value.get("tools_called") or ()),
            tools_not_called=tuple(value.get("tools_not_called") or ()),
            tool_called_with=tuple((str(c["tool"]), dict(c.get("arguments") or {}))
                                   for c in value.get("tool_called_with") or ()),
            max_steps=value.get("max_steps"),
            max_tokens=value.get("max_tokens"),
            max_cost_micros=value.get("max_cost_micros"),
        )

    def verdicts(self, run: RunOutcome) -> list[Verdict]:
        out: list[Verdict] = []
        if self.finished:
            ok = run.status == "finished" and not run.error
            out.append(Verdict("finished", ok, f"the run ended {run.status}"
                               + ("" if not run.error else f": {_short(run.error)}")))
        text = run.answer_text
        for needle in self.answer_contains:
            out.append(Verdict("answer_contains", needle in text, f"{needle!r} "
                               + ("is" if needle in text else "is not") + " in the answer"))
        for needle in self.answer_not_contains:
            out.append(Verdict("answer_not_contains", needle not in text, f"{needle!r} "
                               + ("is" if needle in text else "is not") + " in the answer"))
        if self.answer_matches is not None:
            out.append(_matches(self.answer_matches, text))
        if self.answer_equals_json_set:
            out.append(self._equals_json(run))
        called = [c.tool for c in run.tool_calls]
        for tool in self.tools_called:
            out.append(Verdict("tools_called", tool in called,
                               f"{tool!r} was {'' if tool in called else 'not '}called"))
        for tool in self.tools_not_called:
            out.append(Verdict("tools_not_called", tool not in called,
                               f"{tool!r} was {'' if tool in called else 'not '}called"))
        for tool, wanted in self.tool_called_with:
            hit = any(c.tool == tool and _contains(c.arguments or {}, wanted)
                      for c in run.tool_calls)
            out.append(Verdict("tool_called_with", hit,
                               f"{tool!r} was {'' if hit else 'not '}called with "
                               f"{orjson.dumps(wanted).decode()}"))
        for name, limit, used in (("max_steps", self.max_steps, run.steps),
                                  ("max_tokens", self.max_tokens,
                                   run.input_tokens + run.output_tokens),
                                  ("max_cost_micros", self.max_cost_micros, run.cost_micros)):
            if limit is not None:
                out.append(Verdict(name, used <= limit, f"{used} (at most {limit})"))
        return out

    def _equals_json(self, run: RunOutcome) -> Verdict:
        answer = run.answer
        if isinstance(answer, str):
            try:
                answer = orjson.loads(answer)
            except orjson.JSONDecodeError:
                return Verdict("answer_equals_json", False, "the answer is not JSON")
        same = canonical(answer) == canonical(self.answer_equals_json)
        return Verdict("answer_equals_json", same,
                       "the answer equals the JSON" if same else "the answer differs")


def _matches(pattern: str, text: str) -> Verdict:
    try:
        found = compile_pattern(pattern).search(text) is not None
    except PatternRefused as exc:  # only a set written before patterns were checked by RE2
        return Verdict("answer_matches", False, f"/{pattern}/ is not a pattern RE2 accepts "
                                                f"({exc})")
    return Verdict("answer_matches", found, f"/{pattern}/ "
                   + ("matches" if found else "does not match") + " the answer")


def _contains(arguments: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Every key of ``wanted`` is in ``arguments`` with an equal value (deeply)."""
    return all(key in arguments and canonical(arguments[key]) == canonical(value)
               for key, value in wanted.items())


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= 200 else text[:199] + "…"
