"""What answers a tool call of an evaluation's run instead of the tool (ADR 0034).

An evaluation runs every case of a test set on two versions of an agent as ordinary runs.
Unless the test set asks for live tools, no call of those runs reaches a tenant's server:
each is answered by a **recorded** result (the case's recordings — what the tool returned
in the run the case was made from, or what the tenant wrote down) when the tool and its
arguments are exactly those recorded, else by the test set's **stub** for that tool, else
by a tool error that says there is no recording. Built-in tools (code, files, the browser)
are answered alike: their sandbox touches nothing of the tenant's, but code with egress
hosts and the browser reach the network, and a recorded evaluation reaches nothing. With
``tool_results: live``, a call is made for real only where it can act at most once and
reach nothing outside: a call to a server that honours idempotency keys (a repeat cannot
act twice), or a built-in tool of an agent whose sandbox may reach no host and has no
browser; every other call is still answered here, as a live call without a key is.

The gateway applies the allow-list and approvals first, as for any call: an evaluation
never lets a run call what its version does not allow."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import canonical
from tenantry.tools.builtin import uses_browser
from tenantry.tools.servers import ToolServer

Q = load(__package__)

#: The ToolCompleted outcomes of calls a stand-in answered.
OUTCOMES = frozenset({"recorded", "stub", "no_recording"})
NO_RECORDING = ("this is an evaluation run and no recorded result or stub answers this "
                "call (tool {tool!r} with these arguments): the tool was not called")


@dataclass(frozen=True, slots=True)
class StandInAnswer:
    """A call's answer without the tool: ``result`` or ``error``, and which kind of
    answer it was (``recorded``, ``stub``, ``no_recording``: the ToolCompleted's outcome)."""

    result: str | None
    error: str | None
    outcome: str


@dataclass(frozen=True, slots=True)
class StandIn:
    live: bool  # the test set asks for live calls to servers that honour keys
    recorded: dict[tuple[str, bytes], tuple[str | None, str | None]] = field(
        default_factory=dict)
    stubs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tool_results: str, recordings: list[dict[str, Any]],
           stubs: dict[str, Any]) -> StandIn:
        recorded: dict[tuple[str, bytes], tuple[str | None, str | None]] = {}
        for entry in recordings:
            key = (str(entry["tool"]), canonical(entry.get("arguments") or {}))
            recorded.setdefault(key, (entry.get("result"), entry.get("error")))
        return cls(tool_results == "live", recorded, {str(k): str(v) for k, v in stubs.items()})

    def answer(self, tool: str, arguments: dict[str, Any], *,
               may_call: bool) -> StandInAnswer | None:
        """The stand-in's answer, or None: make the call for real (a live test set, and a
        call that may be made: :func:`may_call`)."""
        if self.live and may_call:
            return None
        found = self.recorded.get((tool, canonical(arguments)))
        if found is not None:
            result, error = found
            if error is not None:
                return StandInAnswer(None, str(error), "recorded")
            return StandInAnswer(str(result if result is not None else ""), None, "recorded")
        if tool in self.stubs:
            return StandInAnswer(self.stubs[tool], None, "stub")
        return StandInAnswer(None, NO_RECORDING.format(tool=tool), "no_recording")


def may_call(spec: AgentSpec, *, builtin: bool, server: ToolServer | None) -> bool:
    """Whether a live evaluation may make this call for real: it cannot act twice and
    reaches nothing outside the platform. A tenant's tool: its server honours idempotency
    keys. A built-in tool: the agent's sandbox may reach no host and has no browser (its
    code then touches only the run's own sandbox)."""
    if builtin:
        return not spec.sandbox.egress and not uses_browser(spec.tools)
    return server is not None and server.honours_idempotency_keys


async def for_run(db: Database, tenant: TenantId, run: RunId) -> StandIn:
    """The stand-in of an evaluation's run. Fails closed: a run whose evaluation the
    database no longer knows gets one that answers every call without the tool."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.evaluation_stand_in, tenant.value, run.uuid)
    if row is None:
        return StandIn(live=False)
    return StandIn.of(row["tool_results"], list(row["recorded"] or []), dict(row["stubs"] or {}))
