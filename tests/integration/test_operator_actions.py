"""Every change the operator API makes is in the operator's action log (the console's
Actions page), named by its route, with its tenant (none when platform-wide) and the status
it was answered — refused ones too; reads and requests without the operator token are not
(api/operator_actions.py, migration 0056)."""

from __future__ import annotations

import pytest

from tenantry.api.console import action_log
from tenantry.ids import TenantId
from tests.support.api import Api
from tests.support.console import operator

pytestmark = pytest.mark.timeout(60)
API = action_log.OPERATOR_API


async def _logged(api: Api) -> list[tuple[str, str, str | None, str, str]]:
    """The Actions page's rows, oldest first, as the console reads them."""
    found = await action_log.entries(api.platform.cross_tenant_db, tenant=None, before=None)
    return [(e.actor, e.action, e.tenant, e.target, e.outcome) for e in reversed(found)]


async def test_each_operator_change_is_logged_once_by_its_route(api: Api) -> None:
    op = api.operator
    made = await api.client.post("/admin/v1/tenants", headers=op,
                                 json={"name": "Logged", "tenant_id": "logged"})
    assert made.status_code == 201, made.text
    secret = await api.client.put("/admin/v1/tenants/logged/secrets/openai-key", headers=op,
                                  json={"value": "sk-never-logged"})
    assert secret.status_code == 201, secret.text
    key = await api.client.post("/admin/v1/tenants/logged/api-keys", headers=op)
    assert key.status_code == 201, key.text
    price = await api.client.put("/admin/v1/prices/logged-model", headers=op, json={
        "input_per_m": 1, "cached_input_per_m": 1, "output_per_m": 1})
    assert price.status_code == 201, price.text
    await api.model_account("platform-acct", "http://127.0.0.1:9/v1", models=["logged-model"])
    made_again = await api.client.post("/admin/v1/tenants", headers=op, json={"name": "X"})
    assert made_again.status_code == 201
    generated = made_again.json()["tenant_id"]

    # Refused, by the holder of the token: on record with the status.
    taken = await api.client.post("/admin/v1/tenants", headers=op,
                                  json={"name": "Again", "tenant_id": "logged"})
    assert taken.status_code == 409, taken.text
    unnamed = await api.client.post("/admin/v1/tenants", headers=op, json={"name": ""})
    assert unnamed.status_code in (400, 422)
    nobody = await api.client.post("/admin/v1/tenants/nobody/api-keys", headers=op)
    assert nobody.status_code == 404
    # Not the operator's: no token, a wrong one. Not changes: reads.
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        r = await api.client.post("/admin/v1/model-accounts", headers=headers, json={})
        assert r.status_code == 401
    assert (await api.client.get("/admin/v1/tenants/logged", headers=op)).status_code == 200
    assert (await api.client.get("/admin/v1/prices", headers=op)).status_code == 200

    assert await _logged(api) == [
        (API, "POST /admin/v1/tenants", "logged", "/admin/v1/tenants", "done (201)"),
        (API, "PUT /admin/v1/tenants/{tenant_id}/secrets/{name}", "logged",
         "/admin/v1/tenants/logged/secrets/openai-key", "done (201)"),
        (API, "POST /admin/v1/tenants/{tenant_id}/api-keys", "logged",
         "/admin/v1/tenants/logged/api-keys", "done (201)"),
        (API, "PUT /admin/v1/prices/{model}", None, "/admin/v1/prices/logged-model",
         "done (201)"),
        (API, "POST /admin/v1/model-accounts", None, "/admin/v1/model-accounts",
         "done (201)"),
        (API, "POST /admin/v1/tenants", generated, "/admin/v1/tenants", "done (201)"),
        (API, "POST /admin/v1/tenants", "logged", "/admin/v1/tenants", "refused (409)"),
        (API, "POST /admin/v1/tenants", None, "/admin/v1/tenants",
         f"refused ({unnamed.status_code})"),
        (API, "POST /admin/v1/tenants/{tenant_id}/api-keys", "nobody",
         "/admin/v1/tenants/nobody/api-keys", "refused (404)")]
    # The tenant's filter shows its own; a platform-wide entry is in the unfiltered list only.
    own = await action_log.entries(api.platform.cross_tenant_db,
                                   tenant=TenantId.parse("logged"), before=None)
    assert [(e.action, e.outcome) for e in own] == [  # newest first
        ("POST /admin/v1/tenants", "refused (409)"),
        ("POST /admin/v1/tenants/{tenant_id}/api-keys", "done (201)"),
        ("PUT /admin/v1/tenants/{tenant_id}/secrets/{name}", "done (201)"),
        ("POST /admin/v1/tenants", "done (201)")]


async def test_the_actions_page_shows_a_platform_wide_change(api: Api) -> None:
    me = operator()
    price = await api.client.put("/admin/v1/prices/page-model", headers=api.operator,
                                 json={"input_per_m": 1, "cached_input_per_m": 1,
                                       "output_per_m": 1})
    assert price.status_code == 201, price.text
    page = await api.client.get("/console/actions", headers=me.headers)
    assert page.status_code == 200
    row = page.text.split('data-action="PUT /admin/v1/prices/{model}"')[1].split("</tr>")[0]
    assert 'data-target="/admin/v1/prices/page-model"' in row
    assert "operator API" in row and 'title="platform-wide">—<' in row
    assert "<code>PUT /admin/v1/prices/{model}</code>" in row and "done (201)" in row


async def test_a_route_added_later_is_logged_with_no_code_of_its_own(api: Api) -> None:
    """The operators' routes came with another change, written without the action log in
    mind: they are on it all the same, platform-wide."""
    r = await api.client.post("/admin/v1/operators", headers=api.operator,
                              json={"email": "ann@ops.example", "role": "support"})
    assert r.status_code == 201, r.text
    ann = r.json()["operator_id"]
    r = await api.client.patch(f"/admin/v1/operators/{ann}", headers=api.operator,
                               json={"role": "admin"})
    assert r.status_code == 200, r.text
    assert await _logged(api) == [
        (API, "POST /admin/v1/operators", None, "/admin/v1/operators", "done (201)"),
        (API, "PATCH /admin/v1/operators/{operator_id}", None, f"/admin/v1/operators/{ann}",
         "done (200)")]
