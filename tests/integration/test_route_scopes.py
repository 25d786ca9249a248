"""Every tenant route needs one scope, and a key without it is refused: a table over the
OpenAPI document's routes, so a new route without a declared scope fails here."""

from __future__ import annotations

import re

from tenantry.tenants.scopes import Scope
from tests.support.api import Api


def _tenant_routes(doc: dict[str, object]) -> list[tuple[str, str, str]]:
    """(method, path, scope) of every operation a tenant key calls."""
    routes = []
    paths = doc["paths"]
    assert isinstance(paths, dict)
    for path, ops in paths.items():
        for method, op in ops.items():
            if path.startswith(("/admin/", "/metrics", "/console", "/oauth/")) or (
                    path in ("/healthz", "/readyz")):
                continue
            assert "x-tenantry-scope" in op, f"{method} {path} declares no scope"
            routes.append((method.upper(), path, op["x-tenantry-scope"]))
    return routes


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


async def _key(api: Api, tenant: str, scopes: list[str]) -> dict[str, str]:
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"name": "+".join(scopes), "scopes": scopes})
    assert r.status_code == 201, r.text
    assert r.json()["scopes"] == sorted(scopes)
    return {"Authorization": f"Bearer {r.json()['api_key']}"}


async def test_each_scopes_key_is_refused_on_every_route_outside_it_and_only_there(
    api: Api,
) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    routes = _tenant_routes(doc)
    assert {scope for _, _, scope in routes} == {s.value for s in Scope}  # each is used
    tenant, _ = await api.tenant()
    for scope in Scope:
        key = await _key(api, tenant, [scope.value])
        for method, path, needs in routes:
            r = await api.client.request(method, _concrete(path), headers=key)
            if needs == scope.value:  # let through: whatever the route then answers
                assert r.status_code not in (401, 403), (scope, method, path, r.text)
            else:
                assert r.status_code == 403, (scope, method, path, r.status_code)
                problem = r.json()
                assert r.headers["content-type"] == "application/problem+json"
                assert (problem["type"], problem["scope"]) == ("forbidden", needs), problem
                assert needs in problem["detail"]


async def test_a_key_older_than_scopes_and_a_key_made_without_them_hold_every_scope(
    api: Api,
) -> None:
    tenant, full = await api.tenant()  # the operator's key, no scopes asked: every one
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator)
    [made] = r.json()["data"]
    assert made["scopes"] == sorted(s.value for s in Scope)
    for path in ("/v1/runs", "/v1/api-keys", "/v1/audit", "/v1/secrets"):
        assert (await api.client.get(path, headers=full)).status_code == 200, path
