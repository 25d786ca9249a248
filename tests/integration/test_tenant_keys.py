"""A tenant runs its own keys (/v1/api-keys): narrowed, expiring, rotated with an overlap,
revoked — and never wider than the key that made them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from tests.support.api import Api


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _keys(api: Api, h: dict[str, str]) -> list[dict[str, object]]:
    r = await api.client.get("/v1/api-keys?limit=200", headers=h)
    assert r.status_code == 200, r.text
    data: list[dict[str, object]] = r.json()["data"]
    return data


async def test_a_narrow_key_does_what_its_scopes_say_and_nothing_more(api: Api) -> None:
    _, admin = await api.tenant()
    r = await api.client.post("/v1/api-keys", headers=admin, json={
        "name": "dashboard", "scopes": ["runs:read"],
        "expires_at": (datetime.now(UTC) + timedelta(days=30)).isoformat()})
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["name"], made["scopes"]) == ("dashboard", ["runs:read"])
    assert made["created_by"].startswith("key:key_") and made["expires_at"] is not None
    viewer = _bearer(made["api_key"])
    assert (await api.client.get("/v1/runs", headers=viewer)).status_code == 200
    r = await api.client.post("/v1/agents", headers=viewer, json={
        "name": "x", "model": "scripted", "system_prompt": "hi"})
    assert r.status_code == 403 and r.json()["scope"] == "agents:manage"
    r = await api.client.get("/v1/api-keys", headers=viewer)
    assert r.status_code == 403 and r.json()["scope"] == "keys:manage"
    # The list never shows a key or its hash.
    listed = await _keys(api, admin)
    assert made["key_id"] in {k["key_id"] for k in listed}
    assert made["api_key"] not in str(listed)


async def test_a_key_cannot_grant_what_it_does_not_hold(api: Api) -> None:
    _, admin = await api.tenant()
    r = await api.client.post("/v1/api-keys", headers=admin,
                              json={"scopes": ["keys:manage", "runs:read"]})
    keeper = _bearer(r.json()["api_key"])
    before = await _keys(api, admin)
    r = await api.client.post("/v1/api-keys", headers=keeper,
                              json={"scopes": ["integrations:manage"]})
    assert r.status_code == 403 and r.json()["scope"] == "integrations:manage", r.text
    # Left out, the scopes are the maker's own, not every scope.
    r = await api.client.post("/v1/api-keys", headers=keeper, json={"name": "same"})
    assert r.status_code == 201 and r.json()["scopes"] == ["keys:manage", "runs:read"]
    # Nor can it rotate a wider key into a new wider one.
    wide = next(k for k in before if k["created_by"] == "operator")
    r = await api.client.post(f"/v1/api-keys/{wide['key_id']}/rotate", headers=keeper)
    assert r.status_code == 403
    assert len(await _keys(api, admin)) == len(before) + 1


async def test_bad_keys_are_refused_whole(api: Api) -> None:
    _, admin = await api.tenant()
    before = await _keys(api, admin)
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    for body, field, status in (
        ({"scopes": ["runs:everything"]}, "scopes", 400),
        ({"scopes": []}, "scopes", 400),
        ({"expires_at": past}, "expires_at", 409),  # well formed; the clock disagrees
        ({"expires_at": "2030-01-01T00:00:00"}, "expires_at", 400),  # no time zone
        ({"expires_at": 4102444800}, "expires_at", 400),  # a number is not a time
        ({"expires_at": "4102444800"}, "expires_at", 400),
        ({"name": "a\u0000b"}, "name", 400),
    ):
        r = await api.client.post("/v1/api-keys", headers=admin, json=body)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert field in r.json()["detail"], (body, r.json())
    for bad in ("nope", "key_" + "0" * 32):
        assert (await api.client.get(f"/v1/api-keys/{bad}", headers=admin)).status_code == 404
    r = await api.client.post(f"/v1/api-keys/{before[0]['key_id']}/rotate", headers=admin,
                              json={"overlap_seconds": 8 * 24 * 3600})
    assert r.status_code == 400
    assert await _keys(api, admin) == before


async def test_rotation_with_an_overlap_keeps_the_old_key_until_then(api: Api) -> None:
    _, admin = await api.tenant()
    made = (await api.client.post("/v1/api-keys", headers=admin,
                                  json={"name": "ci", "scopes": ["runs:read"]})).json()
    old = _bearer(made["api_key"])
    r = await api.client.post(f"/v1/api-keys/{made['key_id']}/rotate", headers=admin,
                              json={"overlap_seconds": 3600})
    assert r.status_code == 201, r.text
    new = r.json()
    assert (new["name"], new["scopes"], new["replaces"]) == ("ci", ["runs:read"],
                                                            made["key_id"])
    assert (await api.client.get("/v1/runs", headers=old)).status_code == 200
    assert (await api.client.get("/v1/runs", headers=_bearer(new["api_key"]))).status_code == 200
    listed = {k["key_id"]: k for k in await _keys(api, admin)}
    stops = datetime.fromisoformat(str(listed[made["key_id"]]["expires_at"]))
    assert timedelta(minutes=59) < stops - datetime.now(UTC) <= timedelta(hours=1)
    # Without an overlap the old one stops at once.
    r = await api.client.post(f"/v1/api-keys/{new['key_id']}/rotate", headers=admin)
    assert (await api.client.get("/v1/runs", headers=_bearer(new["api_key"]))).status_code == 401


async def test_an_expired_key_is_told_so_and_a_revoked_one_is_unknown(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, admin = await api.tenant()
    made = (await api.client.post("/v1/api-keys", headers=admin, json={})).json()
    await admin_conn.execute(  # never used, so no process holds it in its cache
        "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE key_id = $1",
        made["key_id"].removeprefix("key_"))
    r = await api.client.get("/v1/runs", headers=_bearer(made["api_key"]))
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    other = (await api.client.post("/v1/api-keys", headers=admin, json={})).json()
    other_key = _bearer(other["api_key"])
    assert (await api.client.get("/v1/runs", headers=other_key)).status_code == 200
    r = await api.client.delete(f"/v1/api-keys/{other['key_id']}", headers=admin)
    assert r.status_code == 200 and r.json()["revoked_at"]
    r = await api.client.get("/v1/runs", headers=other_key)
    assert r.status_code == 401 and r.json()["detail"] == "Missing or invalid API key."


async def test_another_tenants_keys_are_not_there(api: Api) -> None:
    _, a = await api.tenant("A")
    _, b = await api.tenant("B")
    [b_key] = await _keys(api, b)
    assert b_key["key_id"] not in {k["key_id"] for k in await _keys(api, a)}
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/rotate")):
        r = await api.client.request(method, f"/v1/api-keys/{b_key['key_id']}{suffix}",
                                     headers=a)
        assert r.status_code == 404, (method, r.text)
    assert (await api.client.get("/v1/runs", headers=b)).status_code == 200
