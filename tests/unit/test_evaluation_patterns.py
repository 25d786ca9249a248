"""answer_matches patterns are RE2's: what a tenant's pattern can and cannot do to a verdict."""

from __future__ import annotations

import pytest

from tenantry.evaluations.checks import Checks, PatternRefused, RunOutcome, compile_pattern


def _outcome(answer: str) -> RunOutcome:
    return RunOutcome(status="finished", answer=answer, error=None, steps=1, input_tokens=1,
                      output_tokens=1, cost_micros=0, latency_ms=None)


def test_a_backtracking_bomb_gets_its_verdict_on_a_long_answer() -> None:
    checks = Checks(finished=False, answer_matches="(a+)+b")
    [verdict] = checks.verdicts(_outcome("a" * 100_000))
    assert (verdict.check, verdict.passed) == ("answer_matches", False)
    [verdict] = checks.verdicts(_outcome("a" * 100_000 + "b"))
    assert verdict.passed is True


@pytest.mark.parametrize("pattern", ["(?=a)a", r"(a)\1", "((a{999}){999})", "("])
def test_patterns_re2_refuses_say_why(pattern: str) -> None:
    with pytest.raises(PatternRefused) as refused:
        compile_pattern(pattern)
    assert str(refused.value)  # RE2's reason, for the 400's detail


def test_a_stored_pattern_re2_refuses_is_a_failed_verdict_not_an_error() -> None:
    """Test sets written before patterns were checked by RE2 keep their cases readable."""
    [verdict] = Checks(finished=False, answer_matches="(?=x)x").verdicts(_outcome("x"))
    assert verdict.passed is False and "not a pattern RE2 accepts" in verdict.detail
