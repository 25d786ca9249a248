"""The result of a tool call carried out elsewhere — an activity task (ADR 0015) or a
child run (ADR 0032) — as the call's ToolCompleted: what it returned, capped like any tool
output, or the error saying how it ended; and a call refused before anything started."""

from __future__ import annotations

from tenantry import errors
from tenantry.runs.decide import OneCall
from tenantry.runs.events import ABSENT, ToolCompleted
from tenantry.runs.step_context import StepContext
from tenantry.tools.audit import AuditEntry
from tenantry.tools.gateway import OUTPUT_CAP_BYTES

#: Refusals of the work a call would start (the tenant's admission, a missing agent or
#: activity, a key taken): the model reads them as the call's error; the run goes on.
REFUSED = (errors.QuotaExceeded, errors.BudgetExhausted, errors.Overloaded, errors.Conflict,
           errors.NotFound)


async def complete(d: StepContext, call: OneCall, *, result: str | None = None,
                   error: str | None = None) -> None:
    """``result`` (text, capped at the tool output cap) or ``error``: the call's result."""
    if error is None:
        text = result or ""
        encoded = text.encode()
        truncated = len(encoded) > OUTPUT_CAP_BYTES
        done = ToolCompleted(
            call.key, call.tool, call.reply_seq, call.call_index, call.arguments, server=None,
            result=encoded[:OUTPUT_CAP_BYTES].decode(errors="ignore") if truncated else text,
            truncated=truncated, output_bytes=len(encoded) if truncated else None)
        outcome = "ok"
    else:
        done = ToolCompleted(call.key, call.tool, call.reply_seq, call.call_index,
                             call.arguments, server=None, error=error, result=ABSENT)
        outcome = "error"
    await d.append([done], audit=AuditEntry.of(call.tool, call.key, call.arguments, outcome,
                                               detail=error))


async def refuse(d: StepContext, call: OneCall, error: str) -> float:
    """The call could not be carried out (nothing was started): the model is told why."""
    refused = ToolCompleted(call.key, call.tool, call.reply_seq, call.call_index,
                            call.arguments, server=None, error=error)
    await d.append([refused], audit=AuditEntry.of(call.tool, call.key, call.arguments,
                                                  "refused", detail=error))
    return 0.0
