"""Every way the worker can end a run has a cause in runs/end_causes.py's table: the code
that ends runs (src/tenantry/runs) is read, each terminal event or decision it builds is
turned into its end reason, and a reason missing from the table fails here."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from tenantry.agents.spec import Limits
from tenantry.runs import end_causes
from tenantry.runs.end_causes import CAUSES, Cause, cause_of, end_reason
from tenantry.runs.events import BudgetStopped, RunCancelled, RunFailed, RunFinished

RUNS = Path(end_causes.__file__).parent
#: The one RunFailed written from a decision's text rather than a literal (end_step.fail):
#: its reasons are those of the ``Fail`` decisions, read below.
FROM_DECISION = "decision.reason"
#: Modules that build these to compare with a log, never to end a run.
READERS = {"tenantry.runs.replay"}


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    found = []
    for path in sorted(RUNS.rglob("*.py")):
        module = "tenantry." + ".".join(path.relative_to(RUNS.parent).with_suffix("").parts)
        if module in READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                    node.func.id == name):
                found.append((module, node))
    return found


def _value(module: str, node: ast.expr) -> object:
    """A literal, or a constant the module names (``BLOB_QUOTA``, ``repeats.LIMIT``)."""
    if isinstance(node, ast.Constant):
        return node.value
    owner = importlib.import_module(module)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and hasattr(
            owner, node.value.id):
        return getattr(getattr(owner, node.value.id), node.attr)
    if isinstance(node, ast.Name) and hasattr(owner, node.id):
        return getattr(owner, node.id)
    return ast.unparse(node)  # a variable: the caller says where its values come from


def _argument(module: str, call: ast.Call, index: int, keyword: str) -> object:
    for kw in call.keywords:
        if kw.arg == keyword:
            return _value(module, kw.value)
    return _value(module, call.args[index]) if len(call.args) > index else None


def _reasons() -> set[str]:
    reasons = {"finished"} if _calls("RunFinished") else set()
    for module, call in _calls("RunCancelled"):
        reasons.add(str(_argument(module, call, 0, "reason")))
    for module, call in _calls("RunFailed"):
        if _argument(module, call, 1, "ours") is True:
            reasons.add(end_causes.PLATFORM_FAULT)
        elif (cause := _argument(module, call, 2, "cause")) is not None:
            reasons.add(str(cause))
        elif _argument(module, call, 0, "error") == FROM_DECISION:
            continue  # the Fail decisions' reasons, below
        else:
            reasons.add(f"a RunFailed in {module} with neither ours nor a cause")
    for module, call in _calls("Fail"):
        message = _argument(module, call, 0, "reason")
        reasons.add(end_causes.EMPTY_REPLY if message == "the model returned an empty reply"
                    else f"a Fail decision in {module} ({message!r}): give it a cause")
    for module, call in [*_calls("StopForBudget"), *_calls("BudgetStopped")]:
        limit = _argument(module, call, 0, "limit")
        if limit != "stop.limit":  # end_step: the StopForBudget decisions' limits
            reasons.add(str(limit))
    return reasons


def test_every_end_reason_the_code_can_produce_has_a_cause() -> None:
    reasons = _reasons()
    # The scan finds each family of endings (it would pass vacuously otherwise).
    assert {"finished", "cancel_requested", end_causes.PLATFORM_FAULT, "model_provider",
            end_causes.EMPTY_REPLY, "max_steps", "repeat_limit"} <= reasons
    assert sorted(reasons - CAUSES.keys()) == []


def test_every_agent_limit_has_a_cause() -> None:
    assert {f.name for f in dataclasses.fields(Limits)} <= CAUSES.keys()


@pytest.mark.parametrize(("payload", "cause"), [
    (RunFinished("done"), Cause.COMPLETED),
    (RunCancelled("cancel_requested"), Cause.CANCELLED),
    (RunFailed("The platform failed.", ours=True, error_id="e"), Cause.OURS),
    (RunFailed("HTTP 400", ours=False, cause="model_provider"), Cause.MODEL),
    (RunFailed("the model returned an empty reply", ours=False), Cause.MODEL),
    (RunFailed("no price", ours=False, cause="unpriced_model"), Cause.TENANT),
    (RunFailed("quota full", ours=False, cause="blob_quota"), Cause.TENANT),
    (BudgetStopped("max_steps", 3, 3), Cause.TENANT),
    (BudgetStopped("repeat_limit", 4, 3, reason="repeating"), Cause.TENANT),
    (BudgetStopped("monthly_spend_cap_micros", 9, 5), Cause.TENANT),
])
def test_each_ending_is_whose_doing_it_was(payload: end_causes.Terminal, cause: Cause) -> None:
    assert cause_of(payload) is cause


def test_an_ending_nobody_classified_counts_as_ours() -> None:
    unknown = RunFailed("?", ours=False, cause="something_new")
    assert end_reason(unknown) == "something_new"
    assert cause_of(unknown) is Cause.OURS
