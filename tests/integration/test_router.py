"""`tenantry router`'s app in front of two real cell APIs (each its own database, its own
TENANTRY_CELL and TENANTRY_REGION) and a real directory database: placement by region,
keys recorded and revoked, requests forwarded to the home cell only, and the refusals —
a region with no cell, an unknown cell, an unknown key, a tenant being moved, a home cell
that does not answer."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx2
import pytest

from tenantry.cells import directory
from tests.support.api import OPERATOR_TOKEN, Api, serving_api
from tests.support.cells import Router, directory_database, serving_router
from tests.support.db import dsn_for
from tests.support.pgcluster import free_port
from tests.support.waiting import until

PROBLEM = "application/problem+json"


@dataclass
class Cells:
    eu: Api
    us: Api
    eu_dsn: str
    us_dsn: str
    directory_dsn: str
    router: Router


@pytest.fixture
async def cells(admin_dsn: str, template_db: str) -> AsyncIterator[Cells]:
    names = [f"tenantry_cell_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    admin = await asyncpg.connect(admin_dsn)
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        eu_dsn, us_dsn = (dsn_for(admin_dsn, n) for n in names)
        async with directory_database(admin_dsn) as directory_dsn, \
                serving_api(eu_dsn, cell="eu-1", region="eu") as eu, \
                serving_api(us_dsn, cell="us-1", region="us") as us:
            conn = await asyncpg.connect(directory_dsn)
            try:
                for cell, api in (("eu-1", eu), ("us-1", us)):
                    await directory.add_cell(conn, cell, region=cell[:2], api_url=api.base_url,
                                             operator_token=OPERATOR_TOKEN)
            finally:
                await conn.close()
            async with serving_router(directory_dsn) as router:
                yield Cells(eu, us, eu_dsn, us_dsn, directory_dsn, router)
    finally:
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _tenant(c: Cells, region: str) -> tuple[str, dict[str, str]]:
    r = await c.router.client.post("/admin/v1/tenants", headers=c.router.operator,
                                   json={"name": f"{region} co", "region": region})
    assert r.status_code == 201, r.text
    tenant_id = r.json()["tenant_id"]
    r = await c.router.client.post(f"/admin/v1/tenants/{tenant_id}/api-keys",
                                   headers=c.router.operator, json={"name": "main"})
    assert r.status_code == 201, r.text
    return tenant_id, {"Authorization": f"Bearer {r.json()['api_key']}"}


def _problem(r: httpx2.Response, status: int, type_: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body: dict[str, object] = r.json()
    assert body["type"] == type_ and body["status"] == status
    return body


async def _count(dsn: str, sql: str, *args: object) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        found: int = await conn.fetchval(sql, *args)
        return found
    finally:
        await conn.close()


async def test_tenants_are_placed_by_region_and_served_by_their_home_cell(cells: Cells) -> None:
    eu_tenant, eu_key = await _tenant(cells, "eu")
    us_tenant, us_key = await _tenant(cells, "us")
    r = await cells.router.client.get(f"/admin/v1/tenants/{eu_tenant}",
                                      headers=cells.router.operator)
    assert r.status_code == 200 and r.json()["home_cell"] == "eu-1" and r.json()["region"] == "eu"
    for key, name in ((eu_key, "eu agent"), (us_key, "us agent")):
        r = await cells.router.client.post("/v1/agents", headers=key, json={
            "name": name, "model": "scripted", "system_prompt": "Be brief."})
        assert r.status_code == 201, r.text
    # Each tenant's rows exist in its own cell's database only.
    for tenant, own, other in ((eu_tenant, cells.eu_dsn, cells.us_dsn),
                               (us_tenant, cells.us_dsn, cells.eu_dsn)):
        for table in ("tenants", "api_keys", "agents"):
            sql = f"SELECT count(*) FROM {table} WHERE tenant_id = $1"
            assert await _count(own, sql, tenant) == 1
            assert await _count(other, sql, tenant) == 0
    # One tenant's key never reaches the other's resources, wherever they live.
    r = await cells.router.client.get("/v1/agents", headers=eu_key)
    assert [a["name"] for a in r.json()["data"]] == ["eu agent"]
    r = await cells.router.client.get("/admin/v1/cells", headers=cells.router.operator)
    assert {c["name"]: c["tenants"] for c in r.json()["data"]} == {"eu-1": 1, "us-1": 1}
    assert "operator_token" not in r.text and OPERATOR_TOKEN not in r.text


async def test_refusals_are_problems(cells: Cells) -> None:
    router = cells.router
    body = _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                             json={"name": "x", "region": "ap"}),
                    422, "region_not_served")
    assert body["region"] == "ap" and "ap" in str(body["detail"])
    body = _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                             json={"name": "x", "cell": "nowhere-9"}),
                    404, "not_found")
    assert body["cell"] == "nowhere-9"
    _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                      json={"name": "x\u0000y", "region": "eu"}),
             400, "validation_error")
    _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                      json={"name": "x", "cell": "Bad Cell"}),
             400, "validation_error")
    _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                      content=b"{not json"), 400, "validation_error")
    _problem(await router.client.post("/admin/v1/tenants", json={"name": "x", "region": "eu"}),
             401, "unauthorized")
    _problem(await router.client.get("/v1/agents", headers={"Authorization": "Bearer tnt_nope"}),
             401, "unauthorized")
    _problem(await router.client.get("/v1/agents"), 401, "unauthorized")
    _problem(await router.client.get("/admin/v1/tenants/no-such-tenant",
                                     headers=router.operator), 404, "not_found")
    _problem(await router.client.get("/admin/v1/model-accounts", headers=router.operator),
             404, "not_found")
    _problem(await router.client.post("/admin/v1/tenants", headers=router.operator,
                                      content=b"x" * (65 * 1024)), 413, "payload_too_large")
    # Whatever arrives at the edge is a 4xx problem, never a 5xx.
    _, key = await _tenant(cells, "eu")
    for method, path, headers, content in [
        ("GET", "/v1/agents/%00", key, None),
        ("GET", "/v1/agents/" + "a" * 9000, key, None),
        ("GET", "/admin/v1/tenants/%00/api-keys", router.operator, None),
        ("GET", "/admin/v1/tenants/x%00y", router.operator, None),
        ("POST", "/v1/agents", key, rb'{"name": "a\u0000", "model": "scripted"}'),
        ("POST", "/v1/agents", key, b"\xff\xfe"),
        ("POST", "/admin/v1/tenants", router.operator, rb'{"name": "x", "region": "eu\u0000"}'),
        ("POST", "/admin/v1/tenants", router.operator, rb'{"name": "x", "cell": "a\u0000"}'),
        ("POST", "/admin/v1/tenants", router.operator, b'{"name": "x", "region": 5}'),
        ("POST", "/admin/v1/tenants", router.operator, b'[]'),
        ("TRACE", "/v1/agents", key, None),
        ("GET", "/elsewhere", key, None),
    ]:
        r = await router.client.request(method, path, headers=headers, content=content)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        assert r.headers["content-type"] == PROBLEM, (method, path, r.text)
    # A tenant created on a regional cell without a region gets the cell's.
    r = await cells.eu.client.post("/admin/v1/tenants", headers=cells.eu.operator,
                                   json={"name": "z"})
    assert r.status_code == 201 and (r.json()["region"], r.json()["home_cell"]) == ("eu", "eu-1")
    # A cell refuses a tenant of a region it does not serve, even when called directly.
    r = await cells.eu.client.post("/admin/v1/tenants", headers=cells.eu.operator,
                                   json={"name": "y", "region": "us"})
    assert _problem(r, 422, "region_not_served")["region"] == "us"


async def test_moving_tenant_revoked_key_and_a_cell_that_is_down(cells: Cells) -> None:
    router = cells.router
    tenant, key = await _tenant(cells, "eu")
    assert (await router.client.get("/v1/agents", headers=key)).status_code == 200  # cached
    conn = await asyncpg.connect(cells.directory_dsn)
    try:
        await directory.set_tenant_state(conn, tenant, "moving")

        async def moving() -> bool:
            return (await router.client.get("/v1/agents", headers=key)).status_code == 503

        await until(moving, "the router sees the tenant moving", 10)
        r = await router.client.get("/v1/agents", headers=key)
        _problem(r, 503, "tenant_moving")
        assert r.headers["retry-after"] == "5"
        await directory.set_tenant_state(conn, tenant, "active")
        home = await directory.home_of(conn, tenant)
        assert home is not None and home.state == "active" and home.cell.name == "eu-1"

        # Its home cell stops answering: 503 naming that cell, never another cell's answer.
        await directory.add_cell(conn, "eu-2", region="eu",
                                 api_url=f"http://127.0.0.1:{free_port()}",
                                 operator_token="t", dedicated=True)
        await directory.switch_home_cell(conn, tenant, "eu-2")

        async def down() -> bool:
            return (await router.client.get("/v1/agents", headers=key)).status_code == 503

        await until(down, "the router follows the switch", 10)
        r = await router.client.get("/v1/agents", headers=key)
        body = _problem(r, 503, "cell_unavailable")
        assert body["cell"] == "eu-2" and "eu-2" in str(body["detail"])
        assert r.headers["retry-after"] == "5"
        await directory.switch_home_cell(conn, tenant, "eu-1")
        with pytest.raises(Exception, match="No cell named"):
            await directory.switch_home_cell(conn, tenant, "eu-404")
        with pytest.raises(Exception, match="state must be"):
            await directory.set_tenant_state(conn, tenant, "frozen")
    finally:
        await conn.close()

    async def back() -> bool:
        return (await router.client.get("/v1/agents", headers=key)).status_code == 200

    await until(back, "the tenant is served by eu-1 again", 10)
    r = await router.client.get(f"/admin/v1/tenants/{tenant}/api-keys", headers=router.operator)
    key_id = r.json()["data"][0]["key_id"]
    r = await router.client.delete(f"/admin/v1/tenants/{tenant}/api-keys/{key_id}",
                                   headers=router.operator)
    assert r.status_code == 200, r.text
    _problem(await router.client.get("/v1/agents", headers=key), 401, "unauthorized")


async def test_the_router_is_ready_while_its_directory_answers(admin_dsn: str) -> None:
    async with directory_database(admin_dsn) as directory_dsn, \
            serving_router(directory_dsn) as router:
        r = await router.client.get("/readyz")
        assert r.status_code == 200 and r.json() == {"status": "ready"}
        admin = await asyncpg.connect(admin_dsn)
        try:  # the directory gone: every connection to it cut, none made again
            name = directory_dsn.rsplit("/", 1)[1]
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        finally:
            await admin.close()

        async def unready() -> bool:
            return (await router.client.get("/readyz")).status_code == 503

        await until(unready, "the router answers /readyz 503", 10)
        body = (await router.client.get("/readyz")).json()
        assert body["type"] == "unready" and body["reasons"][0].startswith("directory:")
        assert (await router.client.get("/healthz")).status_code == 200
