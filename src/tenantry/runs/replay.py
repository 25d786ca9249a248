"""Replay: feed a recorded run's log back through the current decision code and report
every place where the code would now decide differently (invariant 11).

Model replies, tool results, cancel requests and other inputs are taken from the log; the
decisions — which step comes next, which tool with which arguments and key, the answer,
the conversation sent to the model — are recomputed and compared with what was recorded."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId
from tenantry.runs import conversation, log, summaries
from tenantry.runs.decide import (
    CallModel,
    CallTool,
    Cancel,
    CompleteActivity,
    CompleteChild,
    Decision,
    Fail,
    Finish,
    RecordUnknown,
    RequestActivity,
    RequestApproval,
    RequestChild,
    StopForBudget,
    Summarize,
    decide,
)
from tenantry.runs.events import (
    ActivityRequested,
    ApprovalRequested,
    BudgetStopped,
    ChildRunStarted,
    Event,
    EventType,
    ModelReplied,
    RunCancelled,
    RunFailed,
    RunFinished,
    Summarized,
    ToolCompleted,
)
from tenantry.runs.state import RunState

Q = load(__package__)
FORMAT = 1

#: Events whose presence in the log is a decision of the agent loop.
DECISIONS = frozenset({
    EventType.MODEL_REPLIED, EventType.TOOL_COMPLETED, EventType.APPROVAL_REQUESTED,
    EventType.ACTIVITY_REQUESTED, EventType.CHILD_RUN_STARTED, EventType.RUN_FINISHED,
    EventType.RUN_FAILED, EventType.RUN_CANCELLED, EventType.BUDGET_STOPPED,
    EventType.SUMMARIZED,
})


@dataclass(frozen=True, slots=True)
class RecordedRun:
    run_id: str
    spec: AgentSpec
    input: Any
    events: tuple[Event, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run_id": self.run_id,
            "agent": self.spec.to_json(),
            "input": self.input,
            "events": [{"seq": e.seq, "type": e.type, "data": e.data} for e in self.events],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RecordedRun:
        if value.get("format") != FORMAT:
            raise ValueError(f"unsupported recorded-run format {value.get('format')!r}")
        epoch = datetime.fromtimestamp(0).astimezone()
        return cls(
            run_id=value["run_id"],
            spec=AgentSpec.from_json(value["agent"]),
            input=value["input"],
            events=tuple(Event(e["seq"], e["type"], e["data"], epoch) for e in value["events"]),
        )

    @classmethod
    def load(cls, path: Path) -> RecordedRun:
        return cls.from_json(orjson.loads(path.read_bytes()))


@dataclass(frozen=True, slots=True)
class Difference:
    run_id: str
    seq: int
    recorded: str
    replayed: str

    def __str__(self) -> str:
        return (f"{self.run_id} seq {self.seq}: recorded {self.recorded}; "
                f"current code decides {self.replayed}")


def replay(record: RecordedRun) -> list[Difference]:
    state = RunState(input=record.input)
    differences: list[Difference] = []
    for index, event in enumerate(record.events):
        if event.type in DECISIONS and not _is_input(event):
            basis = _basis(record, index)
            decision = decide(basis, record.spec, record.run_id)
            mismatch = _compare(decision, event, basis, record.spec)
            if mismatch is not None:
                differences.append(Difference(record.run_id, event.seq, *mismatch))
        state.apply(event)
    return differences


def _basis(record: RecordedRun, index: int) -> RunState:
    """The state the decision recorded at ``index`` was made from: the log up to its
    ``basis_seq`` (inputs that arrived while it was carried out came after it)."""
    event = record.events[index]
    basis = event.payload.basis_seq
    upto = event.seq - 1 if basis is None else basis
    return RunState.fold([e for e in record.events[:index] if e.seq <= upto], record.input)


def _is_input(event: Event) -> bool:
    """Endings the loop did not decide: platform faults, provider refusals, and the
    tenant's monthly spend cap (the tenant's spend is not in the run's log)."""
    match event.payload:
        case BudgetStopped(limit=limit):
            return limit == "monthly_spend_cap_micros"
        case RunFailed(ours=ours, cause=cause):
            return ours is True or cause == "model_provider"
    return False


def _describe(decision: Decision | None) -> str:
    match decision:
        case None:
            return "nothing (the run had ended)"
        case CallTool(tool=tool, key=key, arguments=arguments, invalid=invalid):
            if invalid is not None:
                return f"tool error for call {key} ({invalid!r})"
            return f"call {tool}({_args(arguments)}) with key {key}"
        # An activity call: enqueued, refused or completed, it is the call with its key.
        case RequestActivity(tool=tool, key=key, arguments=arguments) | CompleteActivity(
                tool=tool, key=key, arguments=arguments):
            return f"call {tool}({_args(arguments)}) with key {key}"
        # So is a child run's: started, refused or completed.
        case RequestChild(tool=tool, key=key, arguments=arguments) | CompleteChild(
                tool=tool, key=key, arguments=arguments):
            return f"call {tool}({_args(arguments)}) with key {key}"
        case RecordUnknown(tool=tool, key=key, arguments=arguments):
            return f"unknown outcome for {tool}({_args(arguments)}) with key {key}"
        case RequestApproval(tool=tool, key=key, arguments=arguments):
            return f"approval for {tool}({_args(arguments)}) with key {key}"
        case _:
            return repr(decision)


def _args(arguments: Any) -> str:
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()


def _compare(
    decision: Decision | None, event: Event, state: RunState, spec: AgentSpec
) -> tuple[str, str] | None:
    got = _describe(decision)
    match event.payload:
        case ModelReplied(prompt_sha256=recorded):
            if not isinstance(decision, CallModel):
                return "a model call", got
            if recorded is not None:
                current = conversation.prompt_digest(conversation.messages(state, spec))
                if current != recorded:
                    return (f"a model call with prompt {recorded}",
                            f"a model call with a different prompt ({current})")
        case ApprovalRequested(tool=tool, arguments=arguments, key=key):
            expected = f"approval for {tool}({_args(arguments)}) with key {key}"
            if got != expected:
                return expected, got
        case ActivityRequested(tool=tool, key=key):
            if not (isinstance(decision, RequestActivity) and decision.tool == tool
                    and decision.key == key):
                return f"enqueue {tool} for the call with key {key}", got
        case ChildRunStarted(tool=tool, key=key):
            if not (isinstance(decision, RequestChild) and decision.tool == tool
                    and decision.key == key):
                return f"start a child run for the call with key {key}", got
        case ToolCompleted() as done:
            if done.outcome == "unknown":
                expected = (f"unknown outcome for {done.tool}({_args(done.arguments)}) "
                            f"with key {done.key}")
            elif done.arguments is not None:
                expected = f"call {done.tool}({_args(done.arguments)}) with key {done.key}"
            else:
                expected = f"tool error for call {done.key} ({done.error!r})"
            if got != expected:
                return expected, got
        case RunFinished(answer=answer):
            if decision != Finish(answer):
                return f"finish with {answer!r}", got
        case RunFailed(error=error):
            if decision != Fail(error):
                return f"fail with {error!r}", got
        case RunCancelled():
            if not isinstance(decision, Cancel):
                return "cancel", got
        case BudgetStopped(limit=limit, used=used, max=maximum, reason=reason):
            expected_stop = StopForBudget(limit, used, maximum, reason)
            if decision != expected_stop:
                return repr(expected_stop), got
        case Summarized(upto_seq=upto_seq, prompt_sha256=recorded):
            if decision != Summarize(upto_seq):
                return repr(Summarize(upto_seq)), got
            if recorded is not None:
                current = conversation.prompt_digest(summaries.request(state, spec, upto_seq))
                if current != recorded:
                    return (f"a summary with prompt {recorded}",
                            f"a summary with a different prompt ({current})")
    return None


async def export_run(db: Database, tenant: TenantId, run: RunId) -> RecordedRun:
    async with db.tenant_tx(tenant) as conn:  # the run and its log as of one moment
        row = await conn.fetchrow(Q.run_for_worker, tenant.value, run.uuid)
        if row is None:
            raise NotFound("No run with this id.")
        events = await log.read(conn, tenant, run, after=0, limit=1_000_000)
    return _recorded(str(run), row["spec"], row["input"], events)


async def export_runs(
    db: Database, tenant: TenantId, runs: Sequence[RunId]
) -> list[RecordedRun]:
    """Many runs of one tenant as :func:`export_run` gives each, in two statements of one
    transaction (a replay of thousands of runs reads their logs in pages, not one by one);
    in the order of ``runs``, leaving out any that does not exist."""
    uuids = [run.uuid for run in runs]
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.runs_to_export, tenant.value, uuids)
        logs: dict[uuid.UUID, list[Event]] = {row["run_id"]: [] for row in rows}
        for e in await conn.fetch(Q.events_of_runs, tenant.value, uuids):
            logs[e["run_id"]].append(
                Event(e["seq"], e["type"], e["data"], e["created_at"], e["format"]))
    found = {row["run_id"]: row for row in rows}
    return [_recorded(str(run), found[run.uuid]["spec"], found[run.uuid]["input"],
                      logs[run.uuid])
            for run in runs if run.uuid in found]


def _recorded(run: str, spec: Any, run_input: Any, events: Sequence[Event]) -> RecordedRun:
    """The run as it ran: its version's spec with what its RunCreated changed in it (an
    evaluation candidate's model)."""
    state = RunState.fold(list(events[:1]), run_input) if events else RunState()
    return RecordedRun(run, state.run_spec(AgentSpec.from_json(spec)), run_input,
                       tuple(events))


async def ended_runs(db: Database, tenant: TenantId, page: int = 1000) -> list[RunId]:
    """Every ended run of the tenant, oldest first (read in pages)."""
    found: list[RunId] = []
    after = None
    while True:
        async with db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(Q.ended_runs, tenant.value, after, page)
        found += [RunId(r["run_id"]) for r in rows]
        if len(rows) < page:
            return found
        after = rows[-1]["run_id"]
