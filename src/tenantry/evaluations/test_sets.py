"""An agent's test sets: cases (an input, mechanical checks, recorded tool results) and
how an evaluation answers the runs' tool calls (ADR 0034). Immutable once created: an
evaluation names exactly the cases it ran. The API validates their shape at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

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
    cases: list[dict[str, Any]]  # {name, input, checks, recorded: [{tool, arguments, ...}]}
    created_at: datetime


async def create(db: Database, tenant: TenantId, agent: AgentId, name: str, *,
                 tool_results: str, stubs: dict[str, str],
                 cases: list[dict[str, Any]]) -> TestSet:
    """A case with ``from_run`` takes that run's input (unless it has its own) and records
    every result the run's tool calls got (first their own ``recorded``, then the run's)."""
    test_set = TestSetId.new()
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.agent_exists, tenant.value, agent.uuid) is None:
            raise NotFound(AGENT_NOT_FOUND)
        stored = [await _recorded_case(conn, tenant, agent, index, case)
                  for index, case in enumerate(cases)]
        created = await conn.fetchval(Q.insert_test_set, tenant.value, test_set.uuid,
                                      agent.uuid, name, tool_results, stubs, stored)
        if created is None:
            raise Conflict("This agent has a test set with this name.", field="name")
    return TestSet(test_set, agent, name, tool_results, stubs, stored, created)


async def _recorded_case(conn: Connection, tenant: TenantId, agent: AgentId,
                         index: int, case: dict[str, Any]) -> dict[str, Any]:
    source = case.pop("from_run", None)
    if source is None:
        case.setdefault("recorded", [])
        return case
    field = f"cases[{index}].from_run"
    try:
        run = RunId.parse(source)
    except ValueError:
        raise ValidationFailed(f"{field}: not a run id", field=field) from None
    row = await conn.fetchrow(Q.run_to_record, tenant.value, run.uuid, agent.uuid)
    # A well-formed id of no (finished) run is the tenant's data, not a malformed request.
    if row is None:
        raise Conflict(f"{field}: no run of this agent with this id", field=field)
    if row["status"] != "finished":
        raise Conflict(f"{field}: the run is {row['status']}; a case is made from a "
                       "finished run", field=field)
    if "input" not in case:
        case["input"] = row["input"]
    recorded = list(case.get("recorded") or [])
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
    case["recorded"] = recorded
    case["from_run"] = str(run)
    return case


async def get(db: Database, tenant: TenantId, agent: AgentId, test_set: TestSetId) -> TestSet:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_test_set, tenant.value, agent.uuid, test_set.uuid)
    if row is None:
        raise NotFound(NOT_FOUND)
    return _of(row)


async def list_for(db: Database, tenant: TenantId, agent: AgentId, *,
                   before: TestSetId | None = None, limit: int = 50) -> list[TestSet]:
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.agent_exists, tenant.value, agent.uuid) is None:
            raise NotFound(AGENT_NOT_FOUND)
        rows = await conn.fetch(Q.list_test_sets, tenant.value, agent.uuid,
                                before.uuid if before else None, limit)
    return [_of(r) for r in rows]


def _of(row: asyncpg.Record) -> TestSet:
    return TestSet(TestSetId(row["test_set_id"]), AgentId(row["agent_id"]), row["name"],
                   row["tool_results"], dict(row["stubs"]), list(row["cases"]),
                   row["created_at"])
