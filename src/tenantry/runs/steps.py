"""The driver's dispatch table: each kind of decision (``decide.py``) → the step that
carries it out. Every step takes the run's ``StepContext`` and the decision, and returns
the time it spent waiting on the model or a tool (None: it waited on neither), which the
driver leaves out of the step's platform time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tenantry.runs.activity_step import await_activity, complete_activity, request_activity
from tenantry.runs.child_step import await_child, complete_child, request_child
from tenantry.runs.decide import (
    AwaitActivity,
    AwaitApproval,
    AwaitChild,
    CallModel,
    CallTool,
    Cancel,
    CompleteActivity,
    CompleteChild,
    Decision,
    Fail,
    Finish,
    RecordUnknown,
    RefusedRepeat,
    RequestActivity,
    RequestApproval,
    RequestChild,
    StopForBudget,
    Summarize,
)
from tenantry.runs.end_step import cancel, fail, finish, stop_for_budget
from tenantry.runs.model_step import call_model, summarize
from tenantry.runs.step_context import StepContext
from tenantry.runs.tool_step import call_tool, record_unknown, refuse_repeat
from tenantry.runs.waiting import await_approval, request_approval

__all__ = ["STEPS", "Step"]

#: A step: ``(context, decision) → time waited on the model or a tool, in ms``. The
#: decision's type is the table's key, so each step gets the kind it is written for.
Step = Callable[[StepContext, Any], Awaitable[float | None]]

#: By the decision's exact class (a RefusedRepeat is a CallTool, with its own step).
STEPS: dict[type[Decision], Step] = {
    CallModel: call_model,
    Summarize: summarize,
    RefusedRepeat: refuse_repeat,
    CallTool: call_tool,
    RequestApproval: request_approval,
    AwaitApproval: await_approval,
    RecordUnknown: record_unknown,
    RequestActivity: request_activity,
    AwaitActivity: await_activity,
    CompleteActivity: complete_activity,
    RequestChild: request_child,
    AwaitChild: await_child,
    CompleteChild: complete_child,
    Finish: finish,
    Fail: fail,
    Cancel: cancel,
    StopForBudget: stop_for_budget,
}
