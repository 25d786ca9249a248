"""The driver's dispatch table (runs/steps.py) has a step for every kind of decision the
agent loop can make: a kind without one would fail its runs as a platform fault."""

from __future__ import annotations

from typing import get_args

from tenantry.runs.decide import CallTool, Decision, RefusedRepeat
from tenantry.runs.steps import STEPS


def test_every_decision_kind_has_its_step() -> None:
    kinds = {*get_args(Decision), RefusedRepeat}
    assert set(STEPS) == kinds
    # Looked up by exact class: a refused repeat is not made like a call.
    assert STEPS[RefusedRepeat] is not STEPS[CallTool]
