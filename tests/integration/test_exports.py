"""A tenant exports everything it has (issue 41, ADR 0044): the archive holds every run of
the tenant with its events in seq order (spilled payloads joined back), its trace and its
blob's bytes, its agents and versions, test set, evaluation and usage — a deleted run only
as its tombstone, and nothing of another tenant anywhere in it. Another tenant's export is
a 404 like a missing one; bad input is a 4xx. A crashed or stale attempt never makes a half
archive the export's; an erase takes the exports with everything else."""

from __future__ import annotations

import asyncio
import gzip
import io
import tarfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from tenantry.blobs import Blobs, object_key
from tenantry.bootstrap.worker import run_worker
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.exports import jobs
from tenantry.exports.runner import Exporter
from tenantry.ids import AgentId, TenantId
from tenantry.retention import erase
from tenantry.retention.cleaner import Cleaner
from tenantry.runs.inprocess import LocalWorkers
from tests.support.api import Api, serving_api
from tests.support.blob_stores import stored
from tests.support.db import login_dsn
from tests.support.evaluations import STATUS_CASE, agent_with_two_versions, evaluation_done
from tests.support.object_store_fixtures import StoreUnderTest
from tests.support.retention import Seeded, ended_runs, tenant_and_agent
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

BIG = "0123456789" * 3000  # 30,000 bytes: past the 8 KiB cap, kept in the blob store
FILES = ["manifest.json", "runs.ndjson", "events.ndjson", "traces.ndjson", "blobs.ndjson",
         "tombstones.ndjson", "agents.ndjson", "agent_versions.ndjson", "test_sets.ndjson",
         "evaluations.ndjson", "usage.ndjson"]


def _open(archive: bytes) -> dict[str, bytes]:
    """Every member of the archive by name, in the tar's order."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for info in tar:
            assert info.isfile(), info.name
            handle = tar.extractfile(info)
            assert handle is not None
            members[info.name] = handle.read()
    return members


def _lines(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines()]


async def _all_runs(api: Api, h: dict[str, str]) -> set[str]:
    found: set[str] = set()
    cursor = None
    while True:
        r = await api.client.get("/v1/runs", headers=h,
                                 params={"limit": 200, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        found |= {run["run_id"] for run in r.json()["data"]}
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return found


async def test_a_tenant_exports_every_run_it_has_and_nothing_of_another(
    database_dsn: str, db: Database, fakes: Fakes, blob_store: StoreUnderTest,
) -> None:
    objects = blob_store.objects
    async with serving_api(database_dsn, **blob_store.settings) as api, running_worker(
            database_dsn, fakes.model.base_url, objects=objects):
        # Tenant A: an agent at two versions, a test set and an evaluation of it, a run
        # whose tool output is kept in the blob store, one more run, and one run deleted.
        tenant, h, evaluated = await agent_with_two_versions(api, fakes)
        r = await api.client.post(f"/v1/agents/{evaluated}/test-sets", headers=h, json={
            "name": "status", "cases": [STATUS_CASE], "stubs": {"effect": "shipped (stub)"}})
        assert r.status_code == 201, r.text
        test_set = r.json()["test_set_id"]
        r = await api.client.post(f"/v1/agents/{evaluated}/evaluations", headers=h, json={
            "test_set_id": test_set, "candidate": {"version": 2}})
        assert r.status_code == 201, r.text
        evaluation = r.json()["evaluation_id"]
        await evaluation_done(api, h, evaluated, evaluation)
        agent = await api.agent(h, "echoer", tools=["echo"])
        big_run = await api.start(h, agent, scripted(call("echo", text=BIG), answer("read")))
        big_events = await api.events_until_end(h, big_run)
        ref = next(e for e in big_events if e["type"] == "ToolCompleted")["data"]["output_ref"]
        small_run = await api.start(h, agent, scripted(answer("hello")))
        await api.events_until_end(h, small_run)
        deleted_run = await api.start(h, agent, scripted(answer("forget me")))
        await api.events_until_end(h, deleted_run)
        assert (await api.client.delete(f"/v1/runs/{deleted_run}", headers=h)).status_code == 204

        # Tenant B: its own agent, a run with a blob of its own.
        other, other_h = await api.tenant("Other")
        await api.tool_server(other, fakes.mcp.url)
        other_agent = await api.agent(other_h, "theirs", tools=["echo"])
        other_run = await api.start(other_h, other_agent,
                                    scripted(call("echo", text="B" * 20000), answer("mine")))
        other_events = await api.events_until_end(other_h, other_run)
        other_ref = next(e for e in other_events
                         if e["type"] == "ToolCompleted")["data"]["output_ref"]

        # A asks; a retry with the same key is the same export; nothing is ready yet.
        asked = await api.client.post("/v1/exports", headers={**h, "Idempotency-Key": "e-1"})
        assert asked.status_code == 202, asked.text
        export = asked.json()
        assert export["status"] == "queued" and export["archive_url"] is None
        assert asked.headers["location"] == f"/v1/exports/{export['export_id']}"
        again = await api.client.post("/v1/exports", headers={**h, "Idempotency-Key": "e-1"})
        assert again.status_code == 202 and again.json()["export_id"] == export["export_id"]
        # Who asked is in the tenant's audit trail (a data:export write is an account change).
        trail = (await api.client.get("/v1/audit", headers=h,
                                      params={"kind": "change"})).json()["data"]
        asked_by = [e["actor"] for e in trail if e["action"] == "POST /v1/exports"]
        assert asked_by and set(asked_by) == {f"key:{export['requested_by']}"}
        url = export["url"]
        not_ready = await api.client.get(f"{url}/archive", headers=h)
        assert not_ready.status_code == 404, not_ready.text
        # B: A's export is no export at all, as one that never was.
        for path in (url, f"{url}/archive"):
            refused = await api.client.get(path, headers=other_h)
            assert refused.status_code == 404, path
            assert refused.headers["content-type"] == "application/problem+json"
        assert (await api.client.get("/v1/exports", headers=other_h)).json()["data"] == []

        exporter = Exporter(db, Blobs(db, objects))
        assert await exporter.run_once() is True
        assert await exporter.run_once() is False  # nothing else queued
        done = (await api.client.get(url, headers=h)).json()
        assert done["status"] == "ready", done
        assert done["archive_url"] == f"{url}/archive" and done["attempts"] == 1
        listed = (await api.client.get("/v1/exports", headers=h)).json()
        assert [e["export_id"] for e in listed["data"]] == [export["export_id"]]

        read = await api.client.get(done["archive_url"], headers=h)
        assert read.status_code == 200
        assert read.headers["content-type"] == "application/gzip"
        assert read.headers["content-disposition"] == (
            f'attachment; filename="{tenant}-{export["export_id"]}.tar.gz"')
        assert len(read.content) == done["bytes"]
        members = _open(read.content)
        runs_of_a = await _all_runs(api, h)

    # The archive: manifest first, every file there, their line counts as it says.
    assert list(members)[:len(FILES)] == FILES
    manifest = orjson.loads(members["manifest.json"])
    assert (manifest["format"], manifest["format_version"]) == ("tenantry-export", 1)
    assert (manifest["tenant_id"], manifest["export_id"]) == (tenant, export["export_id"])
    for name in FILES[1:]:
        assert manifest["files"][name]["lines"] == len(members[name].splitlines()), name
    assert manifest["counts"] == done["counts"]

    # Every run of A, by id — the evaluation's runs too — and the deleted one is not.
    runs = {run["run_id"]: run for run in _lines(members["runs.ndjson"])}
    assert set(runs) == runs_of_a
    assert {big_run, small_run} <= set(runs) and deleted_run not in runs
    assert len(runs_of_a) == 4  # two evaluation runs and the two kept runs
    assert runs[big_run]["status"] == "finished" and runs[big_run]["answer"] is not None
    # Its events: each run's whole log in seq order, the big ToolCompleted whole.
    events: dict[str, list[dict[str, Any]]] = {}
    for event in _lines(members["events.ndjson"]):
        events.setdefault(event["run_id"], []).append(event)
    assert set(events) == set(runs)
    for run_id, logged in events.items():
        assert [e["seq"] for e in logged] == list(range(1, len(logged) + 1)), run_id
        assert len(logged) == runs[run_id]["last_seq"]
    assert [(e["type"], e["data"]) for e in events[big_run]] == [
        (e["type"], e["data"]) for e in big_events]
    traces = {trace["run_id"]: trace for trace in _lines(members["traces.ndjson"])}
    assert set(traces) == set(runs) and traces[big_run]["status"] == "finished"
    # Its blob: the bytes the tool returned.
    [blob] = _lines(members["blobs.ndjson"])
    assert (blob["run_id"], blob["ref"], blob["path"]) == (big_run, ref, f"blobs/{ref}")
    assert members[f"blobs/{ref}"] == BIG.encode()
    # The deleted run only as its tombstone.
    [stone] = _lines(members["tombstones.ndjson"])
    assert (stone["run_id"], stone["reason"]) == (deleted_run, "request")
    for name, data in members.items():
        if name not in ("tombstones.ndjson", "usage.ndjson"):
            assert deleted_run.encode() not in data, name
    # Agents and versions, the test set and the evaluation with its runs' verdicts.
    assert {a["agent_id"] for a in _lines(members["agents.ndjson"])} == {evaluated, agent}
    assert sorted((v["agent_id"], v["version"])
                  for v in _lines(members["agent_versions.ndjson"])) == sorted(
        [(evaluated, 1), (evaluated, 2), (agent, 1)])
    [exported_set] = _lines(members["test_sets.ndjson"])
    assert exported_set["test_set_id"] == test_set
    [exported_eval] = _lines(members["evaluations.ndjson"])
    assert exported_eval["evaluation_id"] == evaluation
    assert {r["run_id"] for r in exported_eval["runs"]} <= set(runs)
    assert all(r["result"] is not None for r in exported_eval["runs"])
    # Usage: the billing record of every model call of A's runs, the deleted one's included
    # (usage facts outlive their run: DESIGN §11b).
    usage = _lines(members["usage.ndjson"])
    assert {u["run_id"] for u in usage if u["kind"] == "model"} == set(runs) | {deleted_run}
    # Nothing of B anywhere: not its tenant, agent, run or blob, in any file.
    for name, data in members.items():
        for theirs in (other, other_agent, other_run, other_ref, "B" * 100):
            assert theirs.encode() not in data, (name, theirs)


async def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    for path in ("/v1/exports/nonsense", "/v1/exports/exp_" + "0" * 32,
                 "/v1/exports/run_" + "0" * 32, "/v1/exports/exp_%00",
                 "/v1/exports/nonsense/archive", "/v1/exports/exp_" + "0" * 32 + "/archive"):
        r = await api.client.get(path, headers=h)
        assert r.status_code == 404, (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
    for params in ({"cursor": "exp_\x00"}, {"cursor": "x" * 300}, {"limit": "0"},
                   {"limit": "1\x00"}, {"cursor": "run_" + "0" * 32}):
        r = await api.client.get("/v1/exports", headers=h, params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["type"] == "validation_error"
    for key in ("a b", "x" * 256, "a\tb"):
        r = await api.client.post("/v1/exports", headers={**h, "Idempotency-Key": key})
        assert r.status_code == 400, (key, r.text)
    assert await admin_conn.fetchval("SELECT count(*) FROM exports") == 0
    # No key: 401; a key without data:export: 403 naming it, on every export route.
    assert (await api.client.post("/v1/exports")).status_code == 401
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"scopes": ["runs:read", "runs:write"]})
    assert r.status_code == 201, r.text
    reader = {"Authorization": f"Bearer {r.json()['api_key']}"}
    for method, path in (("POST", "/v1/exports"), ("GET", "/v1/exports"),
                         ("GET", "/v1/exports/exp_" + "0" * 32),
                         ("GET", "/v1/exports/exp_" + "0" * 32 + "/archive")):
        r = await api.client.request(method, path, headers=reader)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["scope"] == "data:export"
    # At most two unfinished at once: the third is refused, typed, and stores nothing.
    for _ in range(2):
        assert (await api.client.post("/v1/exports", headers=h)).status_code == 202
    refused = await api.client.post("/v1/exports", headers=h)
    assert refused.status_code == 429 and refused.json()["type"] == "quota_exceeded"
    assert await admin_conn.fetchval("SELECT count(*) FROM exports") == 2


async def test_a_crashed_or_stale_attempt_never_becomes_the_archive(
    api: Api, db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    objects = blob_store.objects
    blobs = Blobs(db, objects)
    tenant, h = await api.tenant()
    seeded = Seeded(TenantId.parse(tenant), AgentId.parse(await api.agent(h)))
    runs = await ended_runs(admin_conn, seeded, 3, ended_days_ago=1)
    url = (await api.client.post("/v1/exports", headers=h)).json()["url"]

    # The first process claims it, writes half an archive under its attempt's key, and
    # dies (its lease lapses: made so here, rather than waited for).
    first = Exporter(db, blobs)
    claim = await first.claim()
    assert claim is not None and claim.epoch == 1
    assert claim.archive_ref.endswith(".1.tar.gz")
    await objects.put(object_key(seeded.tenant, claim.archive_ref), b"\x1f\x8b half")
    await admin_conn.execute(
        "UPDATE exports SET lease_expires_at = now() - interval '1 second'")

    # Another takes it over and writes it whole; the dead attempt's object is queued.
    second = Exporter(db, blobs)
    assert await second.run_once() is True
    row = await admin_conn.fetchrow("SELECT status, lease_epoch, archive_ref, attempts "
                                    "FROM exports")
    assert (row["status"], row["lease_epoch"], row["attempts"]) == ("ready", 2, 2)
    assert row["archive_ref"].endswith(".2.tar.gz")
    # The stale first attempt, resumed, is refused at its finish and leaves no object.
    assert await first.export(claim) is False
    assert (await api.client.get(url, headers=h)).json()["status"] == "ready"
    await Cleaner(db, blobs).drain_blobs()
    assert await stored(objects, tenant) == {row["archive_ref"]}

    archive = await objects.get(object_key(seeded.tenant, row["archive_ref"]))
    members = _open(archive)
    assert {r["run_id"] for r in _lines(members["runs.ndjson"])} == {str(r) for r in runs}
    assert gzip.decompress(archive)  # whole: it decompresses to its end


async def test_an_export_that_keeps_failing_is_failed_with_its_reason(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    url = (await api.client.post("/v1/exports", headers=h)).json()["url"]
    exporter = Exporter(db, Blobs(db, _Refusing()))
    for _ in range(3):
        claim = await exporter.claim()
        assert claim is not None
        assert await exporter.export(claim) is False
        await admin_conn.execute("UPDATE exports SET lease_expires_at = now()")
    assert await exporter.claim() is None  # the fourth claim fails it instead
    body = (await api.client.get(url, headers=h)).json()
    assert body["status"] == "failed" and body["attempts"] == 3
    assert body["error"] == "gave up after 3 attempts: the blob store did not answer"
    assert (await api.client.get(f"{url}/archive", headers=h)).status_code == 404


async def test_an_erase_takes_the_tenants_exports_and_their_archives(
    api: Api, db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    objects = blob_store.objects
    blobs = Blobs(db, objects)
    leaving, h = await api.tenant("Leaving")
    staying, keep_h = await api.tenant("Staying")
    gone = Seeded(TenantId.parse(leaving), AgentId.parse(await api.agent(h)))
    kept = Seeded(TenantId.parse(staying), AgentId.parse(await api.agent(keep_h)))
    await ended_runs(admin_conn, gone, 2, ended_days_ago=1)
    await ended_runs(admin_conn, kept, 1, ended_days_ago=1)
    exporter = Exporter(db, blobs)
    for headers in (h, keep_h):
        assert (await api.client.post("/v1/exports", headers=headers)).status_code == 202
        assert await exporter.run_once() is True
    assert (await api.client.post("/v1/exports", headers=h)).status_code == 202  # queued
    assert len(await stored(objects, leaving)) == 1

    r = await api.client.post(f"/admin/v1/tenants/{leaving}/erase", headers=api.operator)
    assert r.status_code == 202, r.text
    assert await exporter.run_once() is False  # an erased tenant's export is not started
    done = await erase.run_until_done(Cleaner(db, blobs), gone.tenant, r.json()["job_id"],
                                      poll_seconds=0.05)
    assert done.status == "done"
    assert await stored(objects, leaving) == set()
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM exports WHERE tenant_id = $1", leaving) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    # The other tenant's export and archive are where they were.
    [theirs] = await admin_conn.fetch("SELECT status, archive_ref FROM exports "
                                      "WHERE tenant_id = $1", staying)
    assert theirs["status"] == "ready"
    assert await stored(objects, staying) == {theirs["archive_ref"]}


class _Refusing:
    """An object store that never answers (every call: BlobStoreUnavailable)."""

    def __getattr__(self, name: str) -> Any:
        from tenantry.blobs import BlobStoreUnavailable

        async def refuse(*_args: object, **_kwargs: object) -> Any:
            raise BlobStoreUnavailable("test: the store refuses everything")

        return refuse


async def test_an_expired_export_leaves_with_its_archive_and_a_fresh_one_stays(
    api: Api, db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    objects = blob_store.objects
    blobs = Blobs(db, objects)
    tenant, h = await api.tenant()
    exporter = Exporter(db, blobs)
    urls = []
    for _ in range(2):
        urls.append((await api.client.post("/v1/exports", headers=h)).json()["url"])
        assert await exporter.run_once() is True
    old, fresh = urls
    old_id = old.rsplit("/", 1)[1]
    await admin_conn.execute(
        "UPDATE exports SET expires_at = now() - interval '1 second' "
        "WHERE export_id = $1", uuid.UUID(old_id.removeprefix("exp_")))
    assert len(await stored(objects, tenant)) == 2

    [result] = await Cleaner(db, blobs).run_once([TenantId.parse(tenant)])
    assert result.exports_deleted == 1
    assert (await api.client.get(old, headers=h)).status_code == 404
    assert (await api.client.get(f"{old}/archive", headers=h)).status_code == 404
    kept = (await api.client.get(fresh, headers=h)).json()
    assert kept["status"] == "ready"
    assert await stored(objects, tenant) == {
        await admin_conn.fetchval("SELECT archive_ref FROM exports")}


async def test_a_worker_process_writes_a_queued_export_on_its_own(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    runs = await ended_runs(admin_conn, seeded, 2, ended_days_ago=1)
    export, new = await jobs.request(db, seeded.tenant, requested_by="test",
                                     idempotency_key=None)
    assert new and export.status == "queued"
    settings = Settings.from_env({"TENANTRY_DATA_DIR": str(tmp_path),
                                  "TENANTRY_SANDBOX_BACKEND": "none"})

    async def ready() -> bool:
        return (await jobs.get(db, seeded.tenant, export.export_id)).status == "ready"

    stop, local = asyncio.Event(), LocalWorkers()
    worker = asyncio.create_task(run_worker(settings, login_dsn(database_dsn), stop, local))
    try:
        await until(ready, "the worker's exporter to write the export", 60)
    finally:
        stop.set()
        await worker  # returns: the exporter stopped with it
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "exporter" and not t.done()]
    done = await jobs.get(db, seeded.tenant, export.export_id)
    assert done.archive_ref is not None
    archive = (tmp_path / "blobs" / seeded.tenant.value / done.archive_ref).read_bytes()
    assert len(archive) == done.bytes
    members = _open(archive)
    assert {r["run_id"] for r in _lines(members["runs.ndjson"])} == {str(r) for r in runs}
