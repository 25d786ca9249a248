"""Whose doing a run's end was, read from its terminal event: the label of
``tenantry_runs_ended_by_cause_total`` and the measure of the service level "runs failed
because of us" (docs/how-to/metrics.md).

Every way the worker ends a run has an *end reason* (:func:`end_reason`), and
:data:`CAUSES` is the one table from reason to cause. tests/unit/test_end_causes.py reads
the code that ends runs and fails for an ending missing from the table."""

from __future__ import annotations

import enum

from tenantry.runs.events import BudgetStopped, RunCancelled, RunFailed, RunFinished
from tenantry.runs.repeats import LIMIT as REPEAT_LIMIT

Terminal = RunFinished | RunFailed | RunCancelled | BudgetStopped


class Cause(enum.StrEnum):
    COMPLETED = "completed"  # the run finished with an answer
    OURS = "ours"  # a platform fault ended it (RunFailed{ours: true})
    TENANT = "tenant"  # the tenant's doing: its limits, its configuration, its quota
    MODEL = "model"  # the model provider refused it, or the model gave nothing to go on
    CANCELLED = "cancelled"  # someone asked for it to stop


#: RunFailed with ``ours`` true: the driver's catch-all for a platform fault.
PLATFORM_FAULT = "platform_fault"
#: RunFailed's cause when the tenant's blob quota refused its sandbox files (runs/driver.py).
BLOB_QUOTA = "blob_quota"
#: RunFailed with neither ``ours`` nor a ``cause``: the run loop's own ``Fail`` decision
#: (runs/decide.py), whose one reason is a model reply with no text and no call.
EMPTY_REPLY = "empty_reply"

CAUSES: dict[str, Cause] = {
    "finished": Cause.COMPLETED,
    "cancel_requested": Cause.CANCELLED,  # RunCancelled's reason
    PLATFORM_FAULT: Cause.OURS,
    # RunFailed's cause:
    "model_provider": Cause.MODEL,  # the provider refused the request (ModelRefused)
    EMPTY_REPLY: Cause.MODEL,
    # The operator has no price for the model the tenant's agent names: the event says it
    # is not ours (ours: false), and the run fails before anything is sent or billed.
    "unpriced_model": Cause.TENANT,
    BLOB_QUOTA: Cause.TENANT,  # the tenant's blob quota is full (its sandbox files)
    # BudgetStopped's limit: the agent's limits, and the tenant's monthly spend cap (which
    # parks runs today; logs of older releases end with it).
    "max_steps": Cause.TENANT,
    "max_tokens": Cause.TENANT,
    "max_cost_micros": Cause.TENANT,
    REPEAT_LIMIT: Cause.TENANT,
    "monthly_spend_cap_micros": Cause.TENANT,
}


def end_reason(payload: Terminal) -> str:
    match payload:
        case RunFinished():
            return "finished"
        case RunCancelled(reason=reason):
            return reason
        case RunFailed(ours=True):
            return PLATFORM_FAULT
        case RunFailed(cause=None):
            return EMPTY_REPLY
        case RunFailed(cause=cause):
            return str(cause)
        case BudgetStopped(limit=limit):
            return limit


def cause_of(payload: Terminal) -> Cause:
    """An ending the table does not know counts as ours: it shows in the service level,
    where someone will ask about it, rather than hiding as the tenant's."""
    return CAUSES.get(end_reason(payload), Cause.OURS)
