"""Activities and their tasks over real HTTP (ADR 0013): publish a version, enqueue a task,
a real dispatcher runs it in a bubblewrap sandbox and GET shows its result; versions count
up and are read without the code's bytes; another tenant's activity or task is a 404 like
a missing one; every bad input is a 400 problem that wrote nothing; enqueue is idempotent;
only a dead letter is requeued; admission refuses a task exactly as it refuses a run."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tenantry.vault import Vault
from tests.support.api import TEST_MASTER_KEY, Api, serving_api
from tests.support.db import row_counts
from tests.support.sandbox import TEST_LIMITS, require, sandbox_settings
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

HANDLER = """
    import os
    def handle(value, context):
        return {"doubled": value["n"] * 2, "token": os.environ.get("API_TOKEN")}
"""
#: Tables a refused publish or enqueue must leave alone.
ACTIVITY_TABLES = ("activity_bundles", "activity_versions")


def _b64(text: str) -> str:
    return base64.b64encode(textwrap.dedent(text).encode()).decode()


def _version(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"files": {"main.py": _b64(HANDLER)}, "entrypoint": "main.py:handle",
                            "timeout_seconds": 30, "retry": {"max_attempts": 2,
                                                             "backoff_seconds": 0}}
    body.update(over)
    return body


async def _written(admin: asyncpg.Connection) -> dict[str, int]:
    counts = await row_counts(admin)
    for table in ACTIVITY_TABLES:
        counts[table] = await admin.fetchval(f"SELECT count(*) FROM {table}")
    return counts


@pytest.fixture
async def big_api(database_dsn: str) -> AsyncIterator[Api]:
    """The API with a body limit above the bundle's, so the bundle's own limit answers."""
    async with serving_api(database_dsn, max_body_bytes=4 * 1024 * 1024) as served:
        yield served


@pytest.fixture
async def bwrap(tmp_path: Path) -> AsyncIterator[PooledDriver]:
    require("bwrap")
    settings = sandbox_settings(tmp_path / "sandbox", "bwrap")
    pooled = PooledDriver(sandbox_probe.build_backend("bwrap", settings), pool_size=1,
                          limits=TEST_LIMITS["bwrap"])
    pooled.start()
    try:
        yield pooled
    finally:
        await pooled.close()


async def test_a_published_activity_runs_as_a_task_and_get_shows_its_result(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    tenant, h = await api.tenant()
    await Vault(db, TEST_MASTER_KEY).put(TenantId.parse(tenant), "API_TOKEN", "tok-123")
    r = await api.client.post("/v1/activities", headers=h,
                              json={"name": "double", **_version(secrets=["API_TOKEN"])})
    assert r.status_code == 201, r.text
    published = r.json()
    assert published["version"] == 1 and published["digest"].startswith("sha256:")
    assert published["files"] == [{"path": "main.py",
                                    "size": len(textwrap.dedent(HANDLER).encode())}]
    assert r.headers["location"] == "/v1/activities/double/versions/1"
    assert "def handle" not in r.text and _b64(HANDLER) not in r.text  # no code bytes

    r = await api.client.post("/v1/activity-tasks", headers=h,
                              json={"activity": "double", "input": {"n": 21}})
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["status"] == "queued" and started["version"] == 1
    dispatcher = Dispatcher(db, Vault(db, TEST_MASTER_KEY), bwrap, slots=1, poll_seconds=0.05,
                            heartbeat_every=0.2, limits=TEST_LIMITS["bwrap"])
    dispatcher.start()
    try:
        async def ended() -> bool:
            got = await api.client.get(started["task_url"], headers=h)
            return bool(got.json()["status"] in ("finished", "failed"))
        await until(ended, "the task ends", 240.0)
    finally:
        await dispatcher.stop()
    task = (await api.client.get(started["task_url"], headers=h)).json()
    assert task["status"] == "finished", task
    assert task["result"] == {"doubled": 42, "token": "tok-123"}
    assert task["attempts"] == 1 and task["dead_lettered"] is False
    assert task["activity"] == "double" and task["input"] == {"n": 21}


async def test_versions_count_up_and_are_read_by_number_or_latest(api: Api) -> None:
    _, h = await api.tenant()
    first = (await api.client.post("/v1/activities", headers=h,
                                   json={"name": "double", **_version()})).json()
    r = await api.client.post("/v1/activities/double/versions", headers=h, json=_version(
        files={"main.py": _b64(HANDLER), "lib/util.py": _b64("X = 1\n")}, egress=["example.com"]))
    assert r.status_code == 201, r.text
    second = r.json()
    assert second["version"] == 2 and second["digest"] != first["digest"]
    assert [f["path"] for f in second["files"]] == ["lib/util.py", "main.py"]
    assert second["egress"] == ["example.com"]
    latest = (await api.client.get("/v1/activities/double", headers=h)).json()
    one = (await api.client.get("/v1/activities/double/versions/1", headers=h)).json()
    assert latest == second and one == first
    for path in ("/v1/activities/double/versions/3", "/v1/activities/double/versions/0",
                 "/v1/activities/nope", "/v1/activities/double/versions/x"):
        r = await api.client.get(path, headers=h)
        assert r.status_code == 404 and r.json()["type"] == "not_found", path
    r = await api.client.post("/v1/activities/nope/versions", headers=h, json=_version())
    assert r.status_code == 404
    pinned = (await api.client.post("/v1/activity-tasks", headers=h,
                                    json={"activity": "double", "version": 1})).json()
    assert pinned["version"] == 1
    newest = (await api.client.post("/v1/activity-tasks", headers=h,
                                    json={"activity": "double"})).json()
    assert newest["version"] == 2


async def test_batch_and_warm_settings_are_stored_and_read_back_and_default_to_neither(
    api: Api,
) -> None:
    _, h = await api.tenant()
    plain = (await api.client.post("/v1/activities", headers=h,
                                   json={"name": "plain", **_version()})).json()
    assert plain["batch"] is None and plain["warm"] is None  # a fresh sandbox per attempt
    r = await api.client.post("/v1/activities", headers=h, json={
        "name": "short", **_version(batch={"max_tasks": 20, "max_seconds": 30.5},
                                    warm={"idle_seconds": 45})})
    assert r.status_code == 201, r.text
    assert r.json()["batch"] == {"max_tasks": 20, "max_seconds": 30.5}
    assert r.json()["warm"] == {"idle_seconds": 45.0}
    got = (await api.client.get("/v1/activities/short/versions/1", headers=h)).json()
    assert got == r.json()
    # Settings belong to a version: the next one states its own (here: neither).
    nxt = (await api.client.post("/v1/activities/short/versions", headers=h,
                                 json=_version())).json()
    assert nxt["version"] == 2 and nxt["batch"] is None and nxt["warm"] is None
    schema = (await api.client.get("/openapi.json")).json()["components"]["schemas"]
    assert set(schema["BatchBody"]["required"]) == {"max_tasks", "max_seconds"}
    assert schema["WarmBody"]["properties"]["idle_seconds"]["maximum"] == 3600


async def test_an_agents_name_is_not_taken_over_by_an_activity(api: Api) -> None:
    _, h = await api.tenant()
    await api.agent(h, "helper")
    r = await api.client.post("/v1/activities", headers=h, json={"name": "helper", **_version()})
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    r = await api.client.post("/v1/activity-tasks", headers=h, json={"activity": "helper"})
    assert r.status_code == 404


async def test_another_tenants_activity_and_task_answer_404_like_missing_ones(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, acme = await api.tenant("Acme")
    _, globex = await api.tenant("Globex")
    await api.client.post("/v1/activities", headers=acme, json={"name": "double", **_version()})
    task = (await api.client.post("/v1/activity-tasks", headers=acme,
                                  json={"activity": "double", "input": {"n": 1}})).json()
    missing = f"/v1/activity-tasks/{RunId.new()}"
    before = await _written(admin_conn)
    for method, path, body in (
        ("GET", "/v1/activities/double", None),
        ("GET", "/v1/activities/double/versions/1", None),
        ("POST", "/v1/activities/double/versions", _version()),
        ("POST", "/v1/activity-tasks", {"activity": "double"}),
        ("GET", task["task_url"], None),
        ("POST", f"{task['task_url']}/requeue", None),
    ):
        r = await api.client.request(method, path, headers=globex, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["type"] == "not_found"
    assert await _written(admin_conn) == before
    # A run that is not a task is not one either.
    run = await api.start(acme, await api.agent(acme), "hi")
    r = await api.client.get(f"/v1/activity-tasks/{run}", headers=acme)
    assert r.status_code == 404
    # Exactly what a task that does not exist answers.
    theirs = (await api.client.get(task["task_url"], headers=globex)).json()
    nobody = (await api.client.get(missing, headers=acme)).json()
    assert theirs["detail"] == nobody["detail"]
    # Globex may use the same name for an activity of its own.
    r = await api.client.post("/v1/activities", headers=globex,
                              json={"name": "double", **_version()})
    assert r.status_code == 201 and r.json()["version"] == 1


async def test_enqueue_is_idempotent_and_a_reused_key_with_another_body_conflicts(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    await api.client.post("/v1/activities", headers=h, json={"name": "double", **_version()})
    keyed = {**h, "Idempotency-Key": "order-42"}
    body = {"activity": "double", "input": {"n": 42}}
    first = await api.client.post("/v1/activity-tasks", headers=keyed, json=body)
    retry = await api.client.post("/v1/activity-tasks", headers=keyed, json=body)
    assert first.status_code == retry.status_code == 202
    assert first.json()["task_id"] == retry.json()["task_id"]
    before = await _written(admin_conn)
    r = await api.client.post("/v1/activity-tasks", headers=keyed,
                              json={"activity": "double", "input": {"n": 43}})
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    assert await _written(admin_conn) == before


async def test_only_a_dead_letter_is_requeued(api: Api) -> None:
    _, h = await api.tenant()
    await api.client.post("/v1/activities", headers=h, json={"name": "double", **_version()})
    task = (await api.client.post("/v1/activity-tasks", headers=h,
                                  json={"activity": "double", "input": {"n": 1}})).json()
    r = await api.client.post(f"{task['task_url']}/requeue", headers=h)
    assert r.status_code == 409 and r.json()["type"] == "conflict", r.text
    shown = (await api.client.get(task["task_url"], headers=h)).json()
    assert shown["status"] == "queued" and shown["dead_lettered"] is False


async def test_admission_refuses_a_task_exactly_as_it_refuses_a_run(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"max_queued": 1, "max_running": 1})
    assert r.status_code == 200, r.text
    await api.client.post("/v1/activities", headers=h, json={"name": "double", **_version()})
    assert (await api.client.post("/v1/activity-tasks", headers=h,
                                  json={"activity": "double"})).status_code == 202
    before = await _written(admin_conn)
    task = await api.client.post("/v1/activity-tasks", headers=h, json={"activity": "double"})
    agent = await api.agent(h)
    run = await api.client.post("/v1/runs", headers=h, json={"agent_id": agent, "input": "x"})
    assert task.status_code == run.status_code == 429
    assert task.headers["content-type"] == "application/problem+json"
    assert task.json() == run.json()
    assert task.json()["type"] == "quota_exceeded" and task.json()["limit"] == "max_queued"
    assert await _written(admin_conn) == {**before, "agents": before["agents"] + 1,
                                            "agent_versions": before["agent_versions"] + 1}


def _code(size: int) -> dict[str, str]:
    return {"main.py": _b64("def handle(v, c):\n    return v\n"),
            "blob.py": base64.b64encode(b"#" * size).decode()}


BAD_PUBLISH: list[tuple[str, dict[str, Any]]] = [
    ("code over the size limit", _version(files=_code(1024 * 1024))),
    ("too many files", _version(files={f"m{i}.py": _b64("x = 1\n") for i in range(65)}
                                | {"main.py": _b64(HANDLER)})),
    ("a '..' path", _version(files={"main.py": _b64(HANDLER), "../evil.py": _b64("x")})),
    ("an absolute path", _version(files={"main.py": _b64(HANDLER), "/etc/x.py": _b64("x")})),
    ("a NUL in a path", _version(files={"main.py": _b64(HANDLER), "a\u0000.py": _b64("x")})),
    ("a backslash path", _version(files={"main.py": _b64(HANDLER), "a\\b.py": _b64("x")})),
    ("an entrypoint not in the bundle", _version(entrypoint="other.py:handle")),
    ("an ill-formed entrypoint", _version(entrypoint="main.py")),
    ("invalid base64", _version(files={"main.py": "not base64!!"})),
    ("no files", _version(files={})),
    ("a secret name that is no variable", _version(secrets=["1-bad"])),
    ("an internal egress entry", _version(egress=["169.254.169.254"])),
    ("a localhost egress entry", _version(egress=["localhost"])),
    ("a private egress entry", _version(egress=["10.0.0.5:443"])),
    ("a .internal egress entry", _version(egress=["db.internal"])),
    ("a zero timeout", _version(timeout_seconds=0)),
    ("a timeout over the cap", _version(timeout_seconds=3601)),
    ("too many attempts", _version(retry={"max_attempts": 101})),
    ("no attempts", _version(retry={"max_attempts": 0})),
    ("a negative backoff", _version(retry={"backoff_seconds": -1})),
    ("an exit code out of range", _version(retryable_exit_codes=[256])),
    ("a huge integer", _version(max_sandbox_deaths=2**63)),
    ("a string for an integer", _version(max_sandbox_deaths="3")),
    ("an unknown field", _version(memory=10)),
    ("a batch of zero tasks", _version(batch={"max_tasks": 0, "max_seconds": 10})),
    ("a batch over the task cap", _version(batch={"max_tasks": 1001, "max_seconds": 10})),
    ("a batch without max_seconds", _version(batch={"max_tasks": 5})),
    ("a batch of zero seconds", _version(batch={"max_tasks": 5, "max_seconds": 0})),
    ("a batch over the seconds cap", _version(batch={"max_tasks": 5, "max_seconds": 86401})),
    ("a batch with an unknown field", _version(batch={"max_tasks": 5, "max_seconds": 9,
                                                      "across_tenants": True})),
    ("a batch that is not an object", _version(batch=5)),
    ("a warm idle time of zero", _version(warm={"idle_seconds": 0})),
    ("a warm idle time over the cap", _version(warm={"idle_seconds": 3601})),
    ("a warm idle time that is a string", _version(warm={"idle_seconds": "60"})),
    ("warm without its idle time", _version(warm={})),
]


@pytest.mark.parametrize(("what", "body"), BAD_PUBLISH, ids=[w for w, _ in BAD_PUBLISH])
async def test_bad_input_to_publish_is_a_400_that_writes_nothing(
    big_api: Api, admin_conn: asyncpg.Connection, what: str, body: dict[str, Any],
) -> None:
    api = big_api
    _, h = await api.tenant()
    before = await _written(admin_conn)
    for path, sent in (("/v1/activities", {"name": "act", **body}),):
        r = await api.client.post(path, headers=h, json=sent)
        assert r.status_code == 400, (what, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "validation_error" and r.json()["detail"]
    assert await _written(admin_conn) == before, f"{what}: a refused publish wrote rows"
    # The same body as a next version: refused the same way.
    await api.client.post("/v1/activities", headers=h, json={"name": "act", **_version()})
    before = await _written(admin_conn)
    r = await api.client.post("/v1/activities/act/versions", headers=h, json=body)
    assert r.status_code == 400 and r.json()["type"] == "validation_error", (what, r.text)
    assert await _written(admin_conn) == before


async def test_a_secret_the_tenant_does_not_hold_is_a_409_that_writes_nothing(
    big_api: Api, admin_conn: asyncpg.Connection,
) -> None:
    """Well formed, but naming what the tenant has not stored (yet): its state, not the
    request's shape, so 409 with the field, as for any body naming what does not exist."""
    api = big_api
    _, h = await api.tenant()
    before = await _written(admin_conn)
    body = _version(secrets=["NOT_STORED"])
    r = await api.client.post("/v1/activities", headers=h, json={"name": "act", **body})
    assert r.status_code == 409, r.text
    assert (r.json()["type"], r.json()["field"], r.json()["missing"]) == (
        "conflict", "secrets", ["NOT_STORED"])
    assert await _written(admin_conn) == before


BAD_ENQUEUE: list[tuple[str, dict[str, Any]]] = [
    ("an input over the cap", {"activity": "act", "input": {"x": "y" * (256 * 1024)}}),
    ("a NUL in the input", {"activity": "act", "input": {"x": "a\u0000b"}}),
    ("a NUL in an input key", {"activity": "act", "input": {"a\u0000": 1}}),
    ("an integer past 64 bits in the input", {"activity": "act", "input": {"x": 2**70}}),
    ("a version of zero", {"activity": "act", "version": 0}),
    ("a version past int4", {"activity": "act", "version": 2**31}),
    ("a bad activity name", {"activity": "a/b"}),
    ("an unknown field", {"activity": "act", "priority": "batch"}),
]


@pytest.mark.parametrize(("what", "body"), BAD_ENQUEUE, ids=[w for w, _ in BAD_ENQUEUE])
async def test_bad_input_to_enqueue_is_a_400_that_writes_nothing(
    big_api: Api, admin_conn: asyncpg.Connection, what: str, body: dict[str, Any],
) -> None:
    api = big_api
    _, h = await api.tenant()
    await api.client.post("/v1/activities", headers=h, json={"name": "act", **_version()})
    before = await _written(admin_conn)
    r = await api.client.post("/v1/activity-tasks", headers=h, json=body)
    assert r.status_code == 400, (what, r.text)
    assert r.json()["type"] == "validation_error"
    assert await _written(admin_conn) == before


async def test_a_body_over_the_api_limit_is_413(api: Api) -> None:
    _, h = await api.tenant()
    r = await api.client.post("/v1/activities", headers=h,
                              json={"name": "act", **_version(files=_code(128 * 1024))})
    assert r.status_code == 413 and r.json()["type"] == "payload_too_large"


SEGFAULT = """
    import ctypes
    def handle(value, context):
        ctypes.string_at(0)
"""


async def test_a_dead_letter_shows_as_one_and_requeue_sends_it_back_once(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    r = await api.client.post("/v1/activities", headers=h, json={
        "name": "poison", **_version(files={"main.py": _b64(SEGFAULT)},
                                     retry={"max_attempts": 5, "backoff_seconds": 0},
                                     max_sandbox_deaths=1)})
    assert r.status_code == 201, r.text
    task = (await api.client.post("/v1/activity-tasks", headers=h,
                                  json={"activity": "poison"})).json()
    dispatcher = Dispatcher(db, Vault(db, TEST_MASTER_KEY), bwrap, slots=1, poll_seconds=0.05,
                            heartbeat_every=0.2, limits=TEST_LIMITS["bwrap"])
    dispatcher.start()
    try:
        async def dead() -> bool:
            got = await api.client.get(task["task_url"], headers=h)
            return bool(got.json()["dead_lettered"])
        await until(dead, "the task is dead-lettered", 240.0)
    finally:
        await dispatcher.stop()
    shown = (await api.client.get(task["task_url"], headers=h)).json()
    assert shown["status"] == "waiting" and shown["attempts"] == 1
    assert shown["last_error"] and "SIGSEGV" in shown["last_error"]
    r = await api.client.post(f"{task['task_url']}/requeue", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "queued" and r.json()["dead_lettered"] is False
    again = await api.client.post(f"{task['task_url']}/requeue", headers=h)
    assert again.status_code == 409 and again.json()["task_status"] == "queued"


async def test_a_shedding_cell_refuses_a_task_exactly_as_it_refuses_a_run(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    levels = {"delay_new_runs_at": 1, "refuse_batch_runs_at": 2, "max_queued_runs": 3,
              "load_read_seconds": 0}
    async with serving_api(database_dsn, **levels) as api:
        _, h = await api.tenant()
        await api.client.post("/v1/activities", headers=h,
                              json={"name": "double", **_version()})
        for i in range(3):  # tasks fill the cell as runs do
            r = await api.client.post("/v1/activity-tasks", headers=h,
                                      json={"activity": "double", "input": {"n": i}})
            assert r.status_code == 202, r.text
        agent = await api.agent(h)
        before = await _written(admin_conn)
        task = await api.client.post("/v1/activity-tasks", headers=h,
                                     json={"activity": "double"})
        run = await api.client.post("/v1/runs", headers=h, json={"agent_id": agent,
                                                                  "input": "x"})
        assert task.status_code == run.status_code == 503, task.text
        assert task.json() == run.json()
        assert task.json()["type"] == "overloaded"
        assert task.json()["shed"] == ["batch", "interactive"]
        assert task.headers["retry-after"] == run.headers["retry-after"]
        assert await _written(admin_conn) == before
