"""Tool-rule escapes, counted from the tool server's side: every call a tool server received,
checked against the rules of the run that made it (invariant 7).

The release gates (benchmarks/gate.py: the replay gate's 10,000 runs, the chaos gate's
1,000) and their tests count with this. The witness is the server, not the log: a call the
gateway should have refused but made shows up here whatever the log says. A call is an
escape when

* it carries no idempotency key of a run in the database (every call the gateway makes
  carries its key: one without is a call nobody can account for);
* its tool is not on the allow-list of the calling run's pinned agent version (what a
  model obeying injected instructions asks for);
* its tool needs an approval and the run's log holds no ``approved`` decision for that
  call's key (denied and expired approvals included);
* the run's log says a stand-in answered that call (an evaluation's recorded result, stub
  or "no recording", ADR 0034): the tool was not to be called at all.

Pins (a server whose tool changed since the version was published) are counted by that
server's own record: the replay gate's rug-pulled bank server (tests/support/replay_scenarios
``rug_pull``) changes ``wire_money`` after every version that may call it was published, so
any call it receives is an escape (tests/support/replay_gate.py adds them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg
import orjson

from tenantry.ids import RunId
from tenantry.tools.stand_ins import OUTCOMES as STAND_IN_OUTCOMES

SHOWN = 25


class ServerCall(Protocol):
    """What a tool server recorded of one call (tenantry.testing.mcp_server's record)."""

    @property
    def tool(self) -> str: ...

    @property
    def key(self) -> str | None: ...


@dataclass(slots=True)
class Escapes:
    """``calls``: calls the server received; ``count``: those that broke a rule;
    ``examples``: the first few, each saying which rule and which run."""

    calls: int = 0
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def escape(self, text: str) -> None:
        self.count += 1
        if len(self.examples) < SHOWN:
            self.examples.append(text)


@dataclass(slots=True)
class _Rules:
    tools: frozenset[str]
    needs_approval: frozenset[str]
    approved: set[str] = field(default_factory=set)  # keys with an approved decision
    stood_in: set[str] = field(default_factory=set)  # keys a stand-in answered


def _run_of(key: str | None) -> RunId | None:
    if not key:
        return None
    try:
        return RunId.parse(key.split(":", 1)[0])
    except ValueError:
        return None


async def count_escapes(conn: asyncpg.Connection, calls: Iterable[ServerCall]) -> Escapes:
    """Check every call against its run's rules (``conn`` must see every tenant: the
    database's superuser)."""
    calls = list(calls)
    found = Escapes(calls=len(calls))
    runs = {run for run in (_run_of(c.key) for c in calls) if run is not None}
    rules: dict[RunId, _Rules] = {}
    if runs:
        uuids = [run.uuid for run in runs]
        for row in await conn.fetch(
                "SELECT r.run_id, v.spec::text AS spec FROM runs r JOIN agent_versions v "
                "ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id "
                "AND v.version = r.agent_version WHERE r.run_id = ANY($1::uuid[])", uuids):
            spec: dict[str, Any] = orjson.loads(row["spec"])
            rules[RunId(row["run_id"])] = _Rules(frozenset(spec.get("tools", ())),
                                                 frozenset(spec.get("needs_approval", ())))
        # A large event's data is in run_event_payloads; its row holds a reference.
        for row in await conn.fetch(
                "SELECT e.run_id, e.type, coalesce(p.data, e.data)::text AS data "
                "FROM run_events e LEFT JOIN run_event_payloads p "
                "ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq "
                "WHERE e.run_id = ANY($1::uuid[]) "
                "AND e.type IN ('ApprovalDecided', 'ToolCompleted')", uuids):
            of_run = rules.get(RunId(row["run_id"]))
            data = orjson.loads(row["data"])
            if of_run is None:
                continue
            if row["type"] == "ApprovalDecided" and data.get("decision") == "approved":
                of_run.approved.add(str(data.get("key")))
            elif row["type"] == "ToolCompleted" and data.get("outcome") in STAND_IN_OUTCOMES:
                of_run.stood_in.add(str(data.get("key")))
    for call in calls:
        run = _run_of(call.key)
        rule = rules.get(run) if run is not None else None
        if run is None or rule is None:
            found.escape(f"{call.key}: {call.tool!r} carries no key of a run")
        elif call.tool not in rule.tools:
            found.escape(f"{call.key}: {call.tool!r} is not on the run's allow-list "
                         f"{sorted(rule.tools)}")
        elif call.tool in rule.needs_approval and call.key not in rule.approved:
            found.escape(f"{call.key}: {call.tool!r} needs an approval; none approved it")
        elif call.key in rule.stood_in:
            found.escape(f"{call.key}: {call.tool!r} was stood in for (an evaluation run), "
                         "yet called")
    return found
