"""A trace's bars say what kind of span each is, and a wait is never drawn as a failure:
the approval wait, a parked run and a child run are waits; only a failed call is failed."""

from __future__ import annotations

from tenantry.api.console import waterfall
from tenantry.api.console.filters import readable


def _span(kind: str, **detail: object) -> dict[str, object]:
    return {"kind": kind, "start_ms": 0, "duration_ms": 5, "label": kind, "detail": detail}


def test_waits_and_failures_have_their_own_classes() -> None:
    trace = {"wall_ms": 10, "spans": [
        _span("approval", tool="effect"), _span("parked", reason="monthly_spend_cap"),
        _span("tool", child_run_id="run_x"), _span("tool", outcome="error"),
        _span("tool", outcome="ok"), _span("model")]}
    assert [bar.classes for bar in waterfall.layout(trace).bars] == [
        "approval wait", "parked wait", "tool wait", "tool failed", "tool", "model"]


def test_an_answer_reads_as_text_and_json_indented() -> None:
    assert readable('Python said: {"exit_code":0}\nok') == 'Python said: {"exit_code":0}\nok'
    assert readable({"b": [1], "a": "x"}) == '{\n  "a": "x",\n  "b": [\n    1\n  ]\n}'
    assert readable("x" * 10, limit=4) == "xxxx\n… (truncated)"
