"""The tool step: one call the model asked for, through the tool gateway, recorded as
ToolCompleted (with its audit row and, for sandboxed built-in tools, its billing fact and
an EgressRefused for each egress attempt the sandbox had refused during the call)."""

from __future__ import annotations

import time
from typing import Any

from tenantry.ledger import budget
from tenantry.runs import observe, waiting
from tenantry.runs.decide import CallTool, RecordUnknown, RefusedRepeat
from tenantry.runs.events import ABSENT, EgressRefused, ToolCompleted, ToolStarted
from tenantry.runs.step_context import StepContext
from tenantry.sandbox.egress import EgressRefusal
from tenantry.tools import stand_ins
from tenantry.tools.audit import AuditEntry
from tenantry.tools.builtin import Retry
from tenantry.tools.gateway import ToolResult
from tenantry.tools.stand_ins import StandIn

#: EgressRefused events of one call, one per attempt; attempts past it are folded into one
#: event per reason code (``count``), so a loop of attempts cannot flood the log.
MAX_EGRESS_EVENTS_PER_CALL = 50

UNKNOWN_OUTCOME = ("the platform stopped during this call and the tool cannot dedupe "
                   "repeats, so its outcome is unknown; check before trying again")


def completed(call: CallTool, result: ToolResult,
              sandbox: dict[str, Any] | None) -> ToolCompleted:
    """The ToolCompleted of a call that was made: ``result`` or ``error``, never both."""
    return ToolCompleted(
        call.key, call.tool, call.reply_seq, call.call_index, call.arguments,
        server=result.server, duration_ms=round(result.duration_ms, 3), error=result.error,
        result=result.result if result.error is None else ABSENT, sandbox=sandbox or None,
        truncated=result.truncated,
        output_bytes=result.output_bytes if result.truncated else None,
        output_ref=result.output_ref if result.truncated else None,
        # An evaluation's stand-in answered (ADR 0034): recorded, stub or no_recording.
        outcome=result.outcome if result.outcome in stand_ins.OUTCOMES else None,
        blob_refs=list(result.blob_refs) or None)


async def _stand_in(d: StepContext) -> StandIn | None:
    """An evaluation's run: what answers its calls instead of the tools, read once per
    claim."""
    if d.state.evaluation_id is None:
        return None
    if d.stand_in is None:
        d.stand_in = await stand_ins.for_run(d.engine.db, d.lease.tenant, d.lease.run)
    return d.stand_in


async def call_tool(d: StepContext, call: CallTool) -> float:
    """Make the call (or record why it cannot be made); the time spent in the tool."""
    assert d.spec is not None
    tools, tenant = d.engine.tools, d.lease.tenant
    if call.invalid is not None or call.arguments is None:
        refused = ToolCompleted(call.key, call.tool, call.reply_seq, call.call_index,
                                error=call.invalid)
        await d.append([refused], audit=AuditEntry.of(
            call.tool, call.key, call.arguments, "refused", detail=call.invalid))
        return 0.0
    retry = await tools.retry(tenant, d.spec, call.tool)
    if retry is not Retry.KEYED and not call.fresh_sandbox:
        # The intent is saved first: after a crash this call is never repeated blindly —
        # recorded unknown, or made again on a fresh sandbox (decide.py reads which).
        await d.append([ToolStarted(call.key, call.tool,
                                    fresh_sandbox=retry is Retry.FRESH_SANDBOX)])
    began_ns = time.time_ns()
    result = await tools.call(tenant, d.spec, call.tool, call.arguments, call.key,
                              run=d.lease.run, sandbox_ref=d.state.sandbox_ref,
                              pins=d.tool_pins, stand_in=await _stand_in(d),
                              fresh_sandbox=call.fresh_sandbox)
    if result.waits_for is not None and result.server is not None:
        # Not made: the run waits for its tenant to connect the server (a pending cancel
        # returns here, and the refusal is recorded as the call's result).
        await waiting.park_for_authorization(d, call.key, result.server, result.waits_for)
    sandbox = result.sandbox
    fact = await _sandbox_fact(d, sandbox)
    if fact is not None:  # the run's cost and the log both show what the sandbox cost
        sandbox = {**(sandbox or {}), "cost_micros": fact.cost_micros,
                   "price_version": fact.price_version}
    egress = egress_events(call.key, result.egress_refused, result.egress_dropped)
    attempts = sum(e.count for e in egress)
    # Written by this lease holder with the call's result: the attempts happened in it.
    await d.append([*egress, completed(call, result, sandbox)],
                   audit=result.audit(call.tool, call.key, call.arguments),
                   cost=fact.cost_micros if fact else 0, sandbox=fact,
                   refused_egress=attempts)
    for event in egress:
        d.engine.metrics.egress_refused.inc(d.tenant_class, event.reason_code,
                                            amount=event.count)
    observe.tool_step(d.engine.metrics, tenant=tenant.value,
                      tenant_class=d.tenant_class, run_id=d.run_id,
                      seq=d.state.last_seq, tool=call.tool, key=call.key, result=result,
                      began_ns=began_ns, ended_ns=began_ns + int(result.duration_ms * 1e6))
    return result.duration_ms


async def refuse_repeat(d: StepContext, call: RefusedRepeat) -> float:
    """A call the model repeated up to the agent's limit: not made, the model is told
    (``call.invalid``), and the repeat is counted as told (ADR 0031)."""
    d.engine.metrics.repeats.inc(d.tenant_class, "told")
    return await call_tool(d, call)


def egress_events(key: str, refusals: tuple[EgressRefusal, ...],
                  dropped: int = 0) -> list[EgressRefused]:
    """One event per refused attempt up to the cap; the rest folded into one event per
    reason code, host and port those of its first attempt (``dropped``, the attempts the
    proxy did not even keep, count with the last reason seen)."""
    events = [EgressRefused(key, r.host, r.port, r.reason_code)
              for r in refusals[:MAX_EGRESS_EVENTS_PER_CALL]]
    first: dict[str, EgressRefusal] = {}
    counts: dict[str, int] = {}
    for r in refusals[MAX_EGRESS_EVENTS_PER_CALL:]:
        first.setdefault(r.reason_code, r)
        counts[r.reason_code] = counts.get(r.reason_code, 0) + 1
    if dropped and refusals:
        last = refusals[-1]
        first.setdefault(last.reason_code, last)
        counts[last.reason_code] = counts.get(last.reason_code, 0) + dropped
    return events + [EgressRefused(key, r.host, r.port, code, counts[code])
                     for code, r in first.items()]


async def _sandbox_fact(d: StepContext,
                        sandbox: dict[str, Any] | None) -> budget.SandboxFact | None:
    """The billing fact of a built-in tool call that ran in the sandbox, priced at the
    sandbox price in force now."""
    if not sandbox or "exec_ms" not in sandbox or "backend" not in sandbox:
        return None
    assert d.agent is not None
    sandbox_ms = round(float(sandbox["exec_ms"]))
    quote = await d.engine.prices.sandbox()
    return budget.SandboxFact(seq=0, agent=d.agent, agent_version=d.agent_version,
                              backend=str(sandbox["backend"]), sandbox_ms=sandbox_ms,
                              cost_micros=quote.cost_micros(sandbox_ms),
                              price_version=quote.version)


async def record_unknown(d: StepContext, call: RecordUnknown) -> None:
    unknown = ToolCompleted(call.key, call.tool, call.reply_seq, call.call_index,
                            call.arguments, outcome="unknown", error=UNKNOWN_OUTCOME)
    await d.append([unknown], audit=AuditEntry.of(
        call.tool, call.key, call.arguments, "unknown", detail=UNKNOWN_OUTCOME))
