"""An agent's test sets: cases (an input, mechanical checks, recorded tool results) and
how an evaluation answers the runs' tool calls (ADR 0034). Immutable once created: an
evaluation names exactly the cases it ran. The API validates their shape at the edge.

A case made from a run (``from_run``) copies that run's input and tool results; the copy
is the run's data, so it lives in ``test_case_sources`` by the run's id and the retention
batch deletes it with the run (retention, ``DELETE /v1/runs/{id}``, a tenant's erasure).
The case then reads ``from_run_deleted`` and the rest of the test set is untouched."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import AgentId, RunId, TenantId, TestSetId

Q = load(__package__)

NOT_FOUND = "No test set with this id for this agent."
AGENT_NOT_FOUND = "No agent with this id."


@dataclass(frozen=True, slots=True)
class TestSet:
    __test__ = False  # not a pytest test class, whatever its name says

    test_set_id: TestSetId
    agent_id: AgentId
    name: str
    tool_results: str  # recorded | live
    stubs: dict[str, str]
    # {name, input, checks, recorded: [{tool, arguments, ...}], from_run?}, with what a
    # case copied from its run merged in while that run lives; ``from_run_deleted`` once
    # it was deleted (the copy went with it).
    cases: list[dict[str, Any]]
    created_at: datetime

    def cases_without_their_run(self) -> list[str]:
        """The names of the cases whose run (``from_run``) was deleted since."""
        return [case_name(index, case) for index, case in enumerate(self.cases)
                if case.get("from_run_deleted")]


@dataclass(frozen=True, slots=True)
class TestSetSummary:
    """A test set as a list shows it: no case, only how many."""

    __test__ = False

    test_set_id: TestSetId
    agent_id: AgentId
    name: str
    tool_results: str
    cases: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class _Source:
    """What a case copies from its run: kept apart, keyed by the run, so that deleting the
    run deletes it (migration 0038, the retention batch)."""

    run: RunId
    input: Any  # None: the case has its own
    recorded: list[dict[str, Any]]


def case_name(index: int, case: dict[str, Any]) -> str:
    return str(case.get("name") or f"case {index + 1}")


async def create(db: Database, tenant: TenantId, agent: AgentId, name: str, *,
                 tool_results: str, stubs: dict[str, str],
                 cases: list[dict[str, Any]]) -> TestSet:
    """A case with ``from_run`` takes that run's input (unless it has its own) and records
    every result the run's tool calls got (after the case's own ``recorded``). That copy is
    stored apart from the case, and goes when the run is deleted."""
    test_set = TestSetId.new()
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.agent_exists, tenant.value, agent.uuid) is None:
            raise NotFound(AGENT_NOT_FOUND)
        split = [await _split_case(conn, tenant, agent, index, case)
                 for index, case in enumerate(cases)]
        stored = [case for case, _ in split]
        created = await conn.fetchval(Q.insert_test_set, tenant.value, test_set.uuid,
                                      agent.uuid, name, tool_results, stubs, stored,
                                      len(stored))
        if created is None:
            raise Conflict("This agent has a test set with this name.", field="name")
        sources = {index: source for index, (_, source) in enumerate(split)
                   if source is not None}
        await conn.executemany(Q.insert_case_source, [
            (tenant.value, test_set.uuid, index, s.run.uuid, s.input, s.recorded)
            for index, s in sources.items()])
    return TestSet(test_set, agent, name, tool_results, stubs,
                   [_merged(case, sources.get(index)) for index, case in enumerate(stored)],
                   created)


async def _split_case(conn: Connection, tenant: TenantId, agent: AgentId, index: int,
                      case: dict[str, Any]) -> tuple[dict[str, Any], _Source | None]:
    """The case as stored (what the tenant wrote, and its run's id), and what it copies
    from that run, if it names one."""
    source = case.pop("from_run", None)
    case.setdefault("recorded", [])
    if source is None:
        return case, None
    field = f"cases[{index}].from_run"
    try:
        run = RunId.parse(source)
    except ValueError:
        raise ValidationFailed(f"{field}: not a run id", field=field) from None
    # Locked (KEY SHARE) until the copy is stored: a run deleted meanwhile is either not
    # found here or deleted after the copy exists, and then with it.
    row = await conn.fetchrow(Q.run_to_record, tenant.value, run.uuid, agent.uuid)
    # A well-formed id of no (finished) run is the tenant's data, not a malformed request.
    if row is None:
        raise Conflict(f"{field}: no run of this agent with this id", field=field)
    if row["status"] != "finished":
        raise Conflict(f"{field}: the run is {row['status']}; a case is made from a "
                       "finished run", field=field)
    recorded: list[dict[str, Any]] = []
    for event in await conn.fetch(Q.tool_calls_of_runs, tenant.value, [run.uuid]):
        data = event["data"]
        if data.get("arguments") is None or data.get("outcome") is not None:
            continue  # refused before it was made, unknown, or itself a stand-in's answer
        entry: dict[str, Any] = {"tool": data["tool"], "arguments": data["arguments"]}
        if data.get("error") is not None:
            entry["error"] = data["error"]
        else:
            entry["result"] = data.get("result", "")
        recorded.append(entry)
    case["from_run"] = str(run)
    return case, _Source(run, None if "input" in case else row["input"], recorded)


def _merged(case: dict[str, Any], source: _Source | None) -> dict[str, Any]:
    """The case as read: its own input and recordings, then its run's copy while the run
    lives; once the run was deleted, ``from_run_deleted`` says the copy went with it."""
    if "from_run" not in case:
        return case
    out = dict(case)
    if source is None:
        out["from_run_deleted"] = True
        return out
    if "input" not in out and source.input is not None:
        out["input"] = source.input
    out["recorded"] = [*(out.get("recorded") or []), *source.recorded]
    return out


async def get(db: Database, tenant: TenantId, agent: AgentId, test_set: TestSetId) -> TestSet:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_test_set, tenant.value, agent.uuid, test_set.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        sources = {s["case_index"]: _Source(RunId(s["run_id"]), s["input"], list(s["recorded"]))
                   for s in await conn.fetch(Q.case_sources, tenant.value, test_set.uuid)}
    return TestSet(TestSetId(row["test_set_id"]), AgentId(row["agent_id"]), row["name"],
                   row["tool_results"], dict(row["stubs"]),
                   [_merged(case, sources.get(index)) for index, case in enumerate(row["cases"])],
                   row["created_at"])


async def list_for(db: Database, tenant: TenantId, agent: AgentId, *,
                   before: TestSetId | None = None, limit: int = 50) -> list[TestSetSummary]:
    """A page of the agent's test sets, without their cases (read one to see them)."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.agent_exists, tenant.value, agent.uuid) is None:
            raise NotFound(AGENT_NOT_FOUND)
        rows = await conn.fetch(Q.list_test_sets, tenant.value, agent.uuid,
                                before.uuid if before else None, limit)
    return [TestSetSummary(TestSetId(r["test_set_id"]), AgentId(r["agent_id"]), r["name"],
                           r["tool_results"], r["cases"], r["created_at"]) for r in rows]
