"""Provider model snapshots: the snapshot a provider says served an agent's runs is
recorded, a change is shown on the agent and counted, a tenant can hold the agent's runs on
the accepted snapshot (the wire asks for it by id) and promote the new one."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tenantry.agents import snapshots
from tenantry.agents.snapshots import SnapshotNotes
from tenantry.db import Database
from tenantry.db.migrate import migrate
from tenantry.db.schema_files import available
from tenantry.ids import AgentId, ApiKeyId, TenantId
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.db import login_dsn, scratch_database
from tests.support.history import migrate_originals
from tests.support.retention import Seeded, tenant_and_agent
from tests.support.scripts import answer, scripted
from tests.support.worker import Fakes, running_worker

FIRST, SECOND = "scripted-2026-01-15", "scripted-2026-03-01"
NOTE = "tenantry_note_model_snapshot_v2(text, uuid, text, text, text)"


async def _run(api: Api, h: dict[str, str], agent: str) -> dict[str, Any]:
    """One run to its end; its (only) ModelReplied's data."""
    run_id = await api.start(h, agent, scripted(answer("ok")))
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFinished", events
    [reply] = [e["data"] for e in events if e["type"] == "ModelReplied"]
    assert isinstance(reply, dict)
    return reply


async def _snapshots(api: Api, h: dict[str, str], agent: str) -> dict[str, Any]:
    r = await api.client.get(f"/v1/agents/{agent}/model-snapshots", headers=h)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _changed(api: Api, h: dict[str, str], agent: str) -> bool:
    r = await api.client.get(f"/v1/agents/{agent}", headers=h)
    assert r.status_code == 200, r.text
    changed: bool = r.json()["model_snapshot_changed"]
    return changed


async def test_a_snapshot_change_is_shown_held_back_and_promoted(
    api: Api, fakes: Fakes, database_dsn: str
) -> None:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    assert not await _changed(api, h, agent)
    assert await _snapshots(api, h, agent) == {"data": [], "promotions": []}
    metrics = WorkerMetrics()
    model = fakes.model
    async with running_worker(database_dsn, model.base_url, metrics=metrics):
        # The first snapshot seen is accepted, and the reply records it.
        model.reported_model = FIRST
        reply = await _run(api, h, agent)
        assert (reply["model"], reply["provider_model"]) == ("scripted", FIRST)
        [row] = (await _snapshots(api, h, agent))["data"]
        assert (row["model"], row["accepted"], row["changed_to"], row["changed_at"],
                row["held"]) == ("scripted", FIRST, None, None, False)
        assert not await _changed(api, h, agent)

        # The provider changes what stands behind the name: shown on the agent, counted.
        model.reported_model = SECOND
        reply = await _run(api, h, agent)
        assert reply["provider_model"] == SECOND
        [row] = (await _snapshots(api, h, agent))["data"]
        assert (row["accepted"], row["changed_to"]) == (FIRST, SECOND)
        assert row["changed_at"] is not None
        assert await _changed(api, h, agent)
        assert metrics.model_snapshot_changes.value("standard") == 1
        # Served the new one again: the same change, not counted twice.
        await _run(api, h, agent)
        assert metrics.model_snapshot_changes.value("standard") == 1

        # Held: the next run asks the provider for the accepted snapshot by its id; the
        # run still records (and bills) the platform's name.
        r = await api.client.post(f"/v1/agents/{agent}/model-snapshots/hold", headers=h,
                                  json={"model": "scripted", "held": True})
        assert r.status_code == 200, r.text
        assert (r.json()["held"], r.json()["accepted"]) == (True, FIRST)
        model.reported_model = None  # a provider answers a dated id with that id
        model.requests.clear()
        reply = await _run(api, h, agent)
        assert model.requested_models == [FIRST]
        assert (reply["model"], reply["provider_model"]) == ("scripted", FIRST)
        [row] = (await _snapshots(api, h, agent))["data"]
        assert (row["accepted"], row["changed_to"], row["held"]) == (FIRST, SECOND, True)

        # Only the accepted or the changed-to snapshot can be promoted.
        r = await api.client.post(f"/v1/agents/{agent}/model-snapshots/promote", headers=h,
                                  json={"model": "scripted", "provider_model": "scripted-9"})
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == "conflict"

        # Promoted: the new snapshot is accepted, the change cleared, who did it recorded;
        # the hold stays, now on the new snapshot.
        r = await api.client.post(f"/v1/agents/{agent}/model-snapshots/promote", headers=h,
                                  json={"model": "scripted", "provider_model": SECOND})
        assert r.status_code == 200, r.text
        promoted = r.json()
        assert (promoted["accepted"], promoted["changed_to"], promoted["changed_at"],
                promoted["held"]) == (SECOND, None, None, True)
        assert not await _changed(api, h, agent)
        listed = await _snapshots(api, h, agent)
        assert listed["data"] == [promoted]
        keys = (await api.client.get(f"/admin/v1/tenants/{tenant}/api-keys",
                                     headers=api.operator)).json()["data"]
        [promotion] = listed["promotions"]
        assert (promotion["model"], promotion["previous"], promotion["provider_model"],
                promotion["promoted_by"]) == ("scripted", FIRST, SECOND, keys[0]["key_id"])
        model.requests.clear()
        await _run(api, h, agent)
        assert model.requested_models == [SECOND]

        # Released: runs ask for the name again.
        r = await api.client.post(f"/v1/agents/{agent}/model-snapshots/hold", headers=h,
                                  json={"model": "scripted", "held": False})
        assert r.status_code == 200, r.text
        model.requests.clear()
        await _run(api, h, agent)
        assert model.requested_models == ["scripted"]


async def test_another_tenant_and_bad_input_get_problems_not_5xx(
    api: Api, fakes: Fakes, database_dsn: str
) -> None:
    _, h = await api.tenant("Acme")
    _, other = await api.tenant("Other")
    agent = await api.agent(h)
    async with running_worker(database_dsn, fakes.model.base_url):
        fakes.model.reported_model = FIRST
        await _run(api, h, agent)
    base = f"/v1/agents/{agent}/model-snapshots"
    hold = {"model": "scripted", "held": True}
    promote = {"model": "scripted", "provider_model": FIRST}

    # Another tenant's agent does not exist for it, whatever the route.
    for method, path, body in [("GET", base, None), ("POST", f"{base}/hold", hold),
                               ("POST", f"{base}/promote", promote),
                               ("GET", f"/v1/agents/{agent}", None)]:
        r = await api.client.request(method, path, json=body, headers=other)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["type"] == "not_found"
    # Nothing changed for the owner.
    [row] = (await _snapshots(api, h, agent))["data"]
    assert (row["held"], row["accepted"]) == (False, FIRST)

    # A model the agent's runs never used: nothing to hold or promote yet (409); an id
    # that is none: 404.
    for path, body in [(f"{base}/hold", {"model": "gpt-4o", "held": True}),
                       (f"{base}/promote", {"model": "gpt-4o", "provider_model": FIRST})]:
        r = await api.client.post(path, json=body, headers=h)
        assert r.status_code == 409, (path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert (r.json()["type"], r.json()["field"]) == ("conflict", "model")
    r = await api.client.post("/v1/agents/agt_nothing/model-snapshots/hold", json=hold,
                              headers=h)
    assert r.status_code == 404, r.text

    bad: list[tuple[str, object]] = [
        ("hold", {"model": "scr\x00ipted", "held": True}),
        ("hold", {"model": "", "held": True}),
        ("hold", {"model": "scripted", "held": "yes"}),
        ("hold", {"model": "scripted", "held": True, "extra": 1}),
        ("hold", {"model": "scripted"}),
        ("hold", ["scripted"]),
        ("promote", {"model": "scripted", "provider_model": "a\x00b"}),
        ("promote", {"model": "scripted", "provider_model": ""}),
        ("promote", {"model": "scripted", "provider_model": "x" * 201}),
        ("promote", {"model": "scripted", "provider_model": FIRST, "by": "me"}),
        ("promote", {"model": "\ud800", "provider_model": FIRST}),
    ]
    for action, body in bad:
        # ASCII-escaped JSON: a lone surrogate travels as `\ud800`, as a client may send it.
        r = await api.client.post(f"{base}/{action}", content=json.dumps(body),
                                  headers={**h, "Content-Type": "application/json"})
        assert r.status_code == 400, (action, body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == "validation_error"
    [row] = (await _snapshots(api, h, agent))["data"]
    assert (row["held"], row["accepted"], row["changed_to"]) == (False, FIRST, None)


async def test_a_snapshot_that_cannot_be_recorded_fails_nothing(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The record is information, not part of the step: a write the database refuses is
    logged, and the run goes on and finishes with the reply's snapshot in its log."""
    _, h = await api.tenant()
    agent = await api.agent(h)
    await admin_conn.execute("REVOKE INSERT, UPDATE ON agent_model_snapshots FROM tenantry_app")
    async with running_worker(database_dsn, fakes.model.base_url):
        fakes.model.reported_model = FIRST
        reply = await _run(api, h, agent)
    assert reply["provider_model"] == FIRST
    assert (await _snapshots(api, h, agent))["data"] == []
    assert "could not record the provider's model snapshot" in caplog.text


async def test_a_worker_writes_a_snapshot_only_when_it_differs_from_the_last_it_saw(
    api: Api, db: Database, admin_conn: asyncpg.Connection
) -> None:
    """A steady run costs no statement per step: the same snapshot again is not written
    (shown by taking away the right to write: only a different one then fails)."""
    tenant_id, h = await api.tenant()
    agent = AgentId.parse(await api.agent(h))
    tenant = TenantId(tenant_id)
    notes = SnapshotNotes()
    assert not await notes.note(db, tenant, agent, "scripted", FIRST, "platform")  # accepted
    await admin_conn.execute(f"REVOKE EXECUTE ON FUNCTION {NOTE} FROM tenantry_app")
    for _ in range(3):
        assert not await notes.note(db, tenant, agent, "scripted", FIRST, "platform")
    # Past its refresh time the same snapshot is written again (a change the tenant cleared
    # while the provider still serves it comes back); so is one from another owner's account.
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await SnapshotNotes(refresh_seconds=0).note(db, tenant, agent, "scripted", FIRST,
                                                    "platform")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await notes.note(db, tenant, agent, "scripted", FIRST, "tenant")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await notes.note(db, tenant, agent, "scripted", SECOND, "platform")
    await admin_conn.execute(f"GRANT EXECUTE ON FUNCTION {NOTE} TO tenantry_app")
    # The failed write is tried again; another process (no memory yet) writes once and
    # notices nothing new.
    assert await notes.note(db, tenant, agent, "scripted", SECOND, "platform")
    assert not await SnapshotNotes().note(db, tenant, agent, "scripted", SECOND, "platform")
    [row] = (await _snapshots(api, h, str(agent)))["data"]
    assert (row["accepted"], row["changed_to"]) == (FIRST, SECOND)


async def test_a_snapshot_the_tenants_own_account_reported_never_goes_out_on_a_platform_one(
    api: Api, database_dsn: str,
) -> None:
    """The attack: a tenant's own (bring-your-own-key) account may report any snapshot id
    at all — here one its own endpoint makes up. Held, it must be asked for on the tenant's
    own accounts only: once its calls go to a platform account (its own one removed), they
    ask for the platform's name, which is what the platform prices and bills."""
    made_up = "scripted-premium-2026-12-31"
    async with FakeModelServer() as platform, FakeModelServer() as own:
        await api.model_account("platform", platform.base_url, secret="sk-platform")
        tenant, h = await api.tenant("Brings Keys")
        r = await api.client.put(f"/admin/v1/tenants/{tenant}/secrets/openai",
                                 json={"value": "sk-tenant-own"}, headers=api.operator)
        assert r.status_code == 201, r.text
        await api.model_account("byok-1", own.base_url, tenant=tenant, secret_name="openai")
        agent = await api.agent(h)
        own.reported_model = made_up
        async with running_worker(database_dsn, None):
            reply = await _run(api, h, agent)
            assert (reply["account"], reply["provider_model"]) == ("byok-1", made_up)
            r = await api.client.post(f"/v1/agents/{agent}/model-snapshots/hold", headers=h,
                                      json={"model": "scripted", "held": True})
            assert r.status_code == 200, r.text
            held = r.json()
            assert (held["accepted"], held["held"], held["accepted_on"]) == (
                made_up, True, ["tenant"])
            # On its own account the hold is kept: the wire asks for the snapshot.
            own.requests.clear()
            assert (await _run(api, h, agent))["account"] == "byok-1"
            assert own.requested_models == [made_up]
        r = await api.client.delete("/admin/v1/model-accounts/byok-1", headers=api.operator)
        assert r.status_code == 200, r.text
        async with running_worker(database_dsn, None):  # it sees the platform account only
            reply = await _run(api, h, agent)
        assert (reply["account"], reply["model"]) == ("platform", "scripted")
        assert platform.requested_models == ["scripted"]
        [row] = (await _snapshots(api, h, agent))["data"]
        assert (row["accepted"], row["held"]) == (made_up, True)  # held, where it applies


async def test_owners_are_noted_follow_a_promotion_and_what_came_before_is_held_safely(
    admin_dsn: str,
) -> None:
    """Snapshots noted before owners were (migration 0039): a tenant that never had an
    account of its own was answered on platform accounts only, and its holds go on there;
    another tenant's are not known, held nowhere, until its accounts report them again. A
    previous release's worker still notes (no owner). Owners follow a promotion."""
    owners = next(m.version for m in available() if m.name == "snapshot_pins_per_account_owner")
    async with scratch_database(admin_dsn, "tenantry_owners",
                                prepare=lambda c: migrate_originals(c, upto=owners - 1)) as dsn:
        admin = await asyncpg.connect(dsn)
        db = await Database.connect(login_dsn(dsn), min_size=1, max_size=2)
        try:
            plain, byok = (await tenant_and_agent(db, "plain"),
                           await tenant_and_agent(db, "byok"))
            await admin.execute(
                "INSERT INTO model_accounts (account_id, provider, base_url, models, region, "
                "tenant_id, secret_name) VALUES ('own', 'openai', 'http://x', '{scripted}', "
                "'us', $1, 'k')", byok.tenant.value)
            for seeded in (plain, byok):
                await admin.execute(
                    "INSERT INTO agent_model_snapshots (tenant_id, agent_id, model, accepted, "
                    "changed_to, changed_at, held) VALUES ($1, $2, 'scripted', $3, $4, now(), "
                    "true)", seeded.tenant.value, seeded.agent.uuid, FIRST, SECOND)

            await migrate(admin)

            async def row(seeded: Seeded) -> tuple[Any, ...]:
                [s] = (await snapshots.listed(db, seeded.tenant, seeded.agent))[0]
                return s.accepted, s.accepted_on, s.changed_to, s.changed_on

            assert await row(plain) == (FIRST, ("platform",), SECOND, ("platform",))
            assert await row(byok) == (FIRST, (), SECOND, ())
            # The previous release's worker notes without an owner: nothing is learnt.
            assert not await admin.fetchval(
                "SELECT tenantry_note_model_snapshot($1, $2, 'scripted', $3)",
                byok.tenant.value, byok.agent.uuid, FIRST)
            assert await row(byok) == (FIRST, (), SECOND, ())
            # This release's: the owner that reported the accepted or the changed-to one.
            notes = SnapshotNotes()
            await notes.note(db, byok.tenant, byok.agent, "scripted", FIRST, "tenant")
            await notes.note(db, byok.tenant, byok.agent, "scripted", SECOND, "platform")
            await notes.note(db, byok.tenant, byok.agent, "scripted", SECOND, "tenant")
            assert await row(byok) == (FIRST, ("tenant",), SECOND, ("platform", "tenant"))
            # Promoted: the accepted one was reported where the change was.
            done = await snapshots.promote(db, byok.tenant, byok.agent, "scripted", SECOND,
                                           ApiKeyId.new())
            assert (done.accepted, done.accepted_on, done.changed_to, done.changed_on) == (
                SECOND, ("platform", "tenant"), None, ())
            # A different one is a change, reported by its owner alone.
            assert await notes.note(db, byok.tenant, byok.agent, "scripted", "third", "tenant")
            assert await row(byok) == (SECOND, ("platform", "tenant"), "third", ("tenant",))
        finally:
            await db.close()
            await admin.close()
