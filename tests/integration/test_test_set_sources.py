"""A test case made from a run (`from_run`) copies that run's input and tool results; the
copy is the run's data and goes with it (ADR 0034). Whichever way the run is
deleted — `DELETE /v1/runs/{id}`, retention, the tenant's erasure — nothing of its input or
its tool results is left in the test set, through the API or in the table, while the test
set itself, its other cases and what the tenant wrote in the case stay readable."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.db.migrate import migrate
from tenantry.db.schema_files import available
from tenantry.evaluations import test_sets
from tenantry.ids import AgentId, RunId, TenantId, TestSetId
from tenantry.retention import erase
from tenantry.retention.cleaner import Cleaner
from tests.support.api import Api
from tests.support.db import login_dsn, scratch_database
from tests.support.evaluations import STATUS_CASE, agent_with_two_versions
from tests.support.history import migrate_originals
from tests.support.retention import ended_runs, tenant_and_agent
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes

#: What only the source run holds: in its input (the script carries the note too), in its
#: tool call's arguments and in the result the tool server gave ("applied <note>").
RUN_INPUT, RUN_NOTE = "input-only-the-run-had-51c9", "note-only-the-run-had-7f3e"
OWN_INPUT = scripted(answer("mine"), text="the tenant's own input")
OWN_RECORDING = {"tool": "effect", "arguments": {"note": "own"}, "result": "own result"}


async def _deleted(how: str, api: Api, db: Database, admin_conn: asyncpg.Connection,
                   tenant: str, h: dict[str, str], run: str) -> None:
    if how == "request":
        r = await api.client.delete(f"/v1/runs/{run}", headers=h)
        assert r.status_code == 204, r.text
    elif how == "retention":  # ended long ago: past the default 30 days
        await admin_conn.execute(
            "UPDATE runs SET finished_at = now() - interval '40 days' "
            "WHERE tenant_id = $1 AND status = 'finished'", tenant)
        [result] = await Cleaner(db, None).run_once([TenantId.parse(tenant)])
        assert result.runs == 1, result
    else:
        r = await api.client.post(f"/admin/v1/tenants/{tenant}/erase", headers=api.operator)
        assert r.status_code == 202, r.text
        done = await erase.run_until_done(Cleaner(db, None), TenantId.parse(tenant),
                                          r.json()["job_id"], poll_seconds=0.05)
        assert done.status == "done"
    assert await admin_conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1",
                                     tenant) == 0


@pytest.mark.parametrize("how", ["request", "retention", "erase"])
async def test_what_a_case_copied_from_a_run_goes_with_the_run(
    how: str, api: Api, fakes: Fakes, worker: object, db: Database,
    admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, agent = await agent_with_two_versions(api, fakes)
    source = await api.start(h, agent, scripted(call("effect", note=RUN_NOTE),
                                                answer("Done: {last_tool_result}"),
                                                text=RUN_INPUT))
    await api.events_until_end(h, source)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "from production", "stubs": {"effect": "a stub"}, "cases": [
            {"name": "copied", "from_run": source},
            {"name": "own input", "from_run": source, "input": OWN_INPUT,
             "recorded": [OWN_RECORDING]},
            STATUS_CASE]})
    assert r.status_code == 201, r.text
    made = r.json()
    test_set = made["test_set_id"]
    copied, own, _ = made["cases"]
    # While the run lives, the case reads its input and its calls' results.
    assert copied["input"]["input"] == RUN_INPUT and not copied.get("from_run_deleted")
    assert [(c["arguments"], c["result"]) for c in copied["recorded"]] == [
        ({"note": RUN_NOTE}, f"applied {RUN_NOTE}")]
    assert own["input"] == OWN_INPUT and own["recorded"][0] == OWN_RECORDING
    assert len(own["recorded"]) == 2

    await _deleted(how, api, db, admin_conn, tenant, h, source)

    # Through the platform's own read (the API's key is revoked by an erasure)...
    found = await test_sets.get(db, TenantId.parse(tenant), AgentId.parse(agent),
                                TestSetId.parse(test_set))
    assert RUN_INPUT not in str(found.cases) and RUN_NOTE not in str(found.cases)
    first, second, third = found.cases
    assert first.get("from_run_deleted") is True and first["from_run"] == source
    assert "input" not in first and first["recorded"] == []
    # ...what the tenant wrote in a case stays, the rest of the set is untouched.
    assert second.get("from_run_deleted") is True
    assert (second["input"], second["recorded"]) == (OWN_INPUT, [OWN_RECORDING])
    assert third == {**STATUS_CASE, "recorded": []}
    # In the table: no copy anywhere in the tenant's test set rows.
    rows = await admin_conn.fetch(
        "SELECT t.cases::text AS cases, "
        "       (SELECT count(*) FROM test_case_sources s WHERE s.tenant_id = t.tenant_id) "
        "           AS sources "
        "FROM agent_test_sets t WHERE t.tenant_id = $1", tenant)
    assert [r["sources"] for r in rows] == [0]
    assert RUN_INPUT not in rows[0]["cases"] and RUN_NOTE not in rows[0]["cases"]
    if how == "erase":
        return
    # Through the API alike; a case that lost its run cannot be evaluated any more.
    r = await api.client.get(f"/v1/agents/{agent}/test-sets/{test_set}", headers=h)
    assert r.status_code == 200, r.text
    shown: list[dict[str, Any]] = r.json()["cases"]
    assert RUN_INPUT not in r.text and RUN_NOTE not in r.text
    assert [c["from_run_deleted"] for c in shown] == [True, True, False]
    assert shown[0]["input"] is None and shown[1]["input"] == OWN_INPUT
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": test_set, "candidate": {"version": 2}})
    assert r.status_code == 409, r.text
    assert r.json()["cases_without_their_run"] == ["copied", "own input"]


SOURCES = next(m.version for m in available() if m.name == "evaluation_data_follows_runs")


async def test_upgrading_takes_inline_copies_apart_and_drops_those_of_runs_already_gone(
    admin_dsn: str,
) -> None:
    """Before migration 0038 a case kept its run's copy inline. The upgrade moves it apart
    (input and recordings together: they can no longer be told from the tenant's own), so
    that it goes with its run, and drops at once the copies of runs already deleted."""
    async with scratch_database(admin_dsn, "tenantry_sources",
                                prepare=lambda c: migrate_originals(c, upto=SOURCES - 1)) as dsn:
        admin = await asyncpg.connect(dsn)
        db = await Database.connect(login_dsn(dsn), min_size=1, max_size=2)
        try:
            seeded = await tenant_and_agent(db, "acme")
            [alive] = await ended_runs(admin, seeded, 1, ended_days_ago=1)
            gone = RunId.new()  # deleted by retention before the upgrade: no row
            recorded = [{"tool": "effect", "arguments": {"note": "n"}, "result": "r"}]
            own = {"name": "own", "input": "own input", "checks": {}, "recorded": recorded}
            cases = [{"name": "alive", "from_run": str(alive), "input": "alive input",
                      "checks": {}, "recorded": recorded},
                     {"name": "gone", "from_run": str(gone), "input": "gone input",
                      "checks": {}, "recorded": recorded},
                     own]
            test_set = TestSetId.new()
            await admin.execute(
                "INSERT INTO agent_test_sets (tenant_id, test_set_id, agent_id, name, "
                "tool_results, cases) VALUES ($1, $2, $3, 'old', 'recorded', $4::jsonb)",
                seeded.tenant.value, test_set.uuid, seeded.agent.uuid, json.dumps(cases))

            await migrate(admin)

            stored = json.loads(await admin.fetchval(
                "SELECT cases::text FROM agent_test_sets WHERE test_set_id = $1",
                test_set.uuid))
            assert "alive input" not in str(stored) and "gone input" not in str(stored)
            assert stored[2] == own
            assert [tuple(r) for r in await admin.fetch(
                "SELECT case_index, run_id, input::text FROM test_case_sources")] == [
                (0, alive.uuid, '"alive input"')]
            found = await test_sets.get(db, seeded.tenant, seeded.agent, test_set)
            assert (found.cases[0]["input"], found.cases[0]["recorded"]) == (
                "alive input", recorded)
            assert found.cases[1].get("from_run_deleted") is True
            assert "input" not in found.cases[1] and found.cases[1]["recorded"] == []
            assert found.cases[2] == own
            summary = await test_sets.list_for(db, seeded.tenant, seeded.agent)
            assert [s.cases for s in summary] == [3]
        finally:
            await db.close()
            await admin.close()
