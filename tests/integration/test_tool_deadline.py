"""A tool server that hangs is cut at its deadline — the production default, since faults
are tested at production settings — and the model is told.
The deadline covers the call's retries: a server that honours keys is retried within it,
with the call's key; one that does not is never called twice. A server registered with a
deadline of its own (``call_timeout_seconds``) is cut at that one: sooner, or later than
the default for a tool that takes longer. This test waits out one default deadline (about
30 s) and a little more: its runs hang side by side, on one worker."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from tenantry.testing.mcp_server import EffectsMcpServer
from tenantry.tools.gateway import UNAVAILABLE_RETRIES
from tenantry.tools.servers import DEFAULT_CALL_TIMEOUT_SECONDS
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

#: What a tool call is cut at when its server's registration names no deadline.
DEADLINE_S = DEFAULT_CALL_TIMEOUT_SECONDS
#: Longer than any test runs: the tool never answers.
FOREVER_S = 3600
#: A server registered with a shorter deadline than the default ...
HASTY_DEADLINE_S = 2
#: ... and one with a longer deadline, for a tool that takes longer than the default.
PATIENT_DEADLINE_S = 120
PATIENT_TOOL_S = DEADLINE_S + 3


async def test_a_hanging_tool_server_is_cut_at_the_deadline_and_the_model_is_told(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection
) -> None:
    assert DEADLINE_S == 30  # what docs/how-to/tools-and-approvals.md promises
    # fakes.mcp hangs for two tenants: one registered it as honouring keys, one not.
    keyed, keyed_h = await api.tenant("Keyed")
    await api.tool_server(keyed, fakes.mcp.url, honours_idempotency_keys=True)
    keyless, keyless_h = await api.tenant("Keyless")
    await api.tool_server(keyless, fakes.mcp.url, honours_idempotency_keys=False)
    async with EffectsMcpServer() as flaky:
        # A third server is down for one call (a fast 503, retried), then hangs.
        retried, retried_h = await api.tenant("Retried")
        await api.tool_server(retried, flaky.url, honours_idempotency_keys=True)
        flaky.fail_next(1, status=503)
        # Two more tenants give fakes.mcp a deadline of their own.
        hasty, hasty_h = await api.tenant("Hasty")
        server = await api.tool_server(hasty, fakes.mcp.url, honours_idempotency_keys=True,
                                       call_timeout_seconds=HASTY_DEADLINE_S)
        assert server["call_timeout_seconds"] == HASTY_DEADLINE_S
        patient, patient_h = await api.tenant("Patient")
        await api.tool_server(patient, fakes.mcp.url, honours_idempotency_keys=True,
                              call_timeout_seconds=PATIENT_DEADLINE_S)
        runs: dict[str, tuple[dict[str, str], str]] = {}
        for name, h, seconds in (("keyed", keyed_h, FOREVER_S), ("keyless", keyless_h, FOREVER_S),
                                 ("retried", retried_h, FOREVER_S),
                                 ("hasty", hasty_h, FOREVER_S),
                                 ("patient", patient_h, PATIENT_TOOL_S)):
            agent = await api.agent(h, tools=["slow"])
            runs[name] = (h, await api.start(h, agent, scripted(
                call("slow", seconds=seconds), answer("told: {last_tool_result}"),
                text=f"run of {name}")))
        async with running_worker(database_dsn, fakes.model.base_url):
            # Room for three deadlines: a gateway that waited out each retry's own full
            # deadline would still finish, and fail the counts below rather than time out.
            logs = await asyncio.gather(*(api.events_until_end(h, run_id, within=4 * DEADLINE_S)
                                          for h, run_id in runs.values()))
        by_run = dict(zip(runs, logs, strict=True))
        # The patient server's tool took longer than the default deadline, within its own:
        # the model read its answer.
        patient_events = by_run.pop("patient")
        assert patient_events[-1]["type"] == "RunFinished", patient_events[-1]
        assert "result" in _only(patient_events, "ToolCompleted")
        h, run_id = runs["patient"]
        assert str((await api.run(h, run_id))["answer"]).startswith("told: slept "), run_id
        # The hasty server's call was cut at its own deadline, long before the default.
        hasty_ms = _only(by_run["hasty"], "ToolCompleted")["duration_ms"]
        assert HASTY_DEADLINE_S * 1000 <= hasty_ms < DEADLINE_S * 1000, hasty_ms

        for name, events in by_run.items():
            h, run_id = runs[name]
            assert events[-1]["type"] == "RunFinished", (name, events[-1])
            completed = _only(events, "ToolCompleted")
            assert "timed out" in completed["error"] and "result" not in completed, completed
            # Cut at its deadline, not before.
            deadline = HASTY_DEADLINE_S if name == "hasty" else DEADLINE_S
            assert completed["duration_ms"] >= deadline * 1000, (name, completed)
            # The model's next request holds the error, as a tool result it can act on.
            prompt = _next_request_after_tool(fakes, f"run of {name}")
            assert f"ERROR: {completed['error']}" in prompt, name
            # ... and the run went on from there.
            assert str((await api.run(h, run_id))["answer"]).startswith("told: ERROR: "), name

        # The keyless server's call was made once: ToolStarted before it, never repeated.
        keyless_events = by_run["keyless"]
        started = _only(keyless_events, "ToolStarted")
        assert _calls_with(fakes.mcp, started["key"]) == 1
        # The keyed one honours keys, but its call hung through the whole deadline: no time
        # was left to try again (a retry waiting out a deadline of its own is what this
        # test forbids).
        assert not [e for e in by_run["keyed"] if e["type"] == "ToolStarted"]
        keyed_key = _only(by_run["keyed"], "ToolCompleted")["key"]
        assert _calls_with(fakes.mcp, keyed_key) == 1
        # The flaky server's 503 was retried inside the deadline, with the same key, and no
        # more often than the gateway's bound; the retry is the call that hung.
        key = _only(by_run["retried"], "ToolCompleted")["key"]
        assert [c.key for c in flaky.refused] == [key]
        assert [c.key for c in flaky.calls] == [key]
        assert len(flaky.refused) + len(flaky.calls) <= 1 + UNAVAILABLE_RETRIES
        assert {c.header_key for c in [*flaky.refused, *flaky.calls]} == {key}
    # Every call anyone made went to fakes.mcp under one of the four runs' keys.
    assert len(fakes.mcp.calls) == 4
    audited = await admin_conn.fetch("SELECT outcome FROM audit_log ORDER BY outcome")
    assert [r["outcome"] for r in audited] == ["ok"] + ["unavailable"] * 4


def _only(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [e["data"] for e in events if e["type"] == kind]
    assert len(found) == 1, (kind, found)
    data: dict[str, Any] = found[0]
    return data


def _calls_with(server: EffectsMcpServer, key: str) -> int:
    return sum(1 for c in server.calls if c.key == key)


def _next_request_after_tool(fakes: Fakes, marker: str) -> str:
    """The tool message of the model request that followed the run's tool call."""
    for request in fakes.model.requests:
        body = request.json()
        if body is None or marker not in request.body.decode():
            continue
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if tools:
            content: str = tools[-1]["content"]
            return content
    raise AssertionError(f"no model request after the tool call of {marker!r}")
