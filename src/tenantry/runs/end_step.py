"""The steps that end a run: its answer, its own failure, a cancel request, or one of its
agent's limits reached. Each appends the terminal event through ``StepContext.end``, which
also sets the run row's status, answer and error in the same commit."""

from __future__ import annotations

from tenantry.runs.child_step import cancel_children
from tenantry.runs.decide import Cancel, Fail, Finish, StopForBudget
from tenantry.runs.events import BudgetStopped, RunCancelled, RunFailed, RunFinished
from tenantry.runs.repeats import REPEATING
from tenantry.runs.step_context import StepContext


async def finish(d: StepContext, decision: Finish) -> None:
    await d.end(RunFinished(decision.answer))


async def fail(d: StepContext, decision: Fail) -> None:
    await d.end(RunFailed(decision.reason, ours=False))


async def cancel(d: StepContext, decision: Cancel) -> None:
    await cancel_children(d)  # first: a crash in between repeats it
    await d.end(RunCancelled("cancel_requested"))


async def stop_for_budget(d: StepContext, stop: StopForBudget) -> None:
    metrics = d.engine.metrics
    metrics.budget_refusals.inc(d.tenant_class, stop.limit)
    if stop.reason == REPEATING:
        metrics.repeats.inc(d.tenant_class, "stopped")
    error = {"type": "budget_exhausted", "limit": stop.limit, "message": _stop_message(stop)}
    if stop.reason is not None:
        error["reason"] = stop.reason
    await d.end(BudgetStopped(stop.limit, stop.used, stop.maximum, reason=stop.reason),
                error=error)


def _stop_message(stop: StopForBudget) -> str:
    """The run row's error message for an agent-limit stop."""
    if stop.reason == REPEATING:
        return (f"stopped for repeating: the model repeated itself {stop.used} times in a "
                f"row after it was told (the agent's {stop.limit} is {stop.maximum})")
    return f"stopped by the agent's {stop.limit} limit ({stop.used} of {stop.maximum} used)"
