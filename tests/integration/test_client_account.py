"""The SDK's view of the tenant's own account: keys with scopes (both clients), the 403 a
narrow key meets as a typed error naming the scope, and the audit trail."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from tenantry.client import AsyncClient, Client, Forbidden, IssuedApiKey, Unauthorized
from tests.support.api import Api
from tests.support.cli import cli


async def test_keys_and_the_audit_trail_through_both_clients(api: Api) -> None:
    _, h = await api.tenant()
    key = h["Authorization"].removeprefix("Bearer ")
    until = datetime.now(UTC) + timedelta(days=1)
    async with AsyncClient(api.base_url, key) as client:
        made = await client.api_keys.create(name="viewer", scopes=["runs:read"],
                                            expires_at=until)
        assert isinstance(made, IssuedApiKey) and made.api_key.startswith("tnt_")
        assert made.api_key not in repr(made)
        assert (made.key.scopes, made.key.expires_at) == (("runs:read",), until)
        async with AsyncClient(api.base_url, made.api_key) as narrow:
            await narrow.runs.list()
            with pytest.raises(Forbidden) as refused:
                await narrow.audit.list()
            assert refused.value.extra["scope"] == "audit:read"
        rotated = await client.api_keys.rotate(made.key.key_id, overlap_seconds=60)
        assert rotated.key.replaces == made.key.key_id
        listed = await client.api_keys.list()
        assert {k.key_id for k in listed} >= {made.key.key_id, rotated.key.key_id}
        await client.api_keys.revoke(rotated.key.key_id)
        changes = await client.audit.list(kind="change")
        assert [e.action for e in changes][:3] == [
            "DELETE /v1/api-keys/{key_id}", "POST /v1/api-keys/{key_id}/rotate",
            "POST /v1/api-keys"]

    def blocking() -> None:
        with Client(api.base_url, key) as client:
            assert client.api_keys.get(made.key.key_id).name == "viewer"
            entries = client.audit.list(limit=1)
            assert len(entries) == 1 and entries.next_cursor is not None
        with Client(api.base_url, rotated.api_key, max_retries=0) as gone, pytest.raises(
                Unauthorized):
            gone.runs.list()

    await asyncio.to_thread(blocking)


async def test_the_cli_makes_lists_rotates_and_revokes_keys_and_reads_the_trail(
    api: Api,
) -> None:
    _, h = await api.tenant()
    env = {"TENANTRY_URL": api.base_url,
           "TENANTRY_API_KEY": h["Authorization"].removeprefix("Bearer ")}
    code, out, err = await cli("api-keys", "create", "--name", "ci", "--scope", "runs:read",
                               "--expires-at", "2099-01-01T00:00:00Z", env=env)
    assert code == 0, err
    new_key = out.strip()  # alone on standard output: `> key.txt` keeps just the key
    assert new_key.startswith("tnt_") and "shown this once" in err and "runs:read" in err
    code, out, _ = await cli("api-keys", "list", env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert header[:4] == ["key_id", "prefix", "name", "scopes"]
    [ci] = [r for r in rows if r[2] == "ci"]
    assert (ci[3], ci[4]) == ("runs:read", "2099-01-01T00:00:00")
    code, out, err = await cli("api-keys", "rotate", ci[0], "--overlap", "60", env=env)
    rotated = out.strip()
    assert code == 0 and rotated.startswith("tnt_") and rotated != new_key, err
    code, out, _ = await cli("api-keys", "revoke", ci[0], env=env)
    assert (code, out.strip()) == (0, f"revoked {ci[0]}")
    code, out, _ = await cli("audit", "--kind", "change", env=env)
    assert code == 0
    whats = [line.split("\t")[3] for line in out.splitlines()[1:]]
    assert whats[:3] == ["DELETE /v1/api-keys/{key_id} → 200",
                         "POST /v1/api-keys/{key_id}/rotate → 201", "POST /v1/api-keys → 201"]
    # Refusals are one line and exit status 2, nothing made.
    for args, says in ((("--expires-at", "2099-01-01T00:00:00"), "time zone"),
                       (("--scope", "runs:everything"), "scope"),
                       (("--expires-at", "soon"), "ISO 8601")):
        code, out, err = await cli("api-keys", "create", *args, env=env)
        assert (code, out) == (2, "") and says in err and len(err.strip().splitlines()) == 1
    code, out, err = await cli("api-keys", "list", env={**env, "TENANTRY_API_KEY": new_key})
    assert code == 2 and "401" in err  # revoked, overlap or not
    code, out, err = await cli("api-keys", "list", env={**env, "TENANTRY_API_KEY": rotated})
    assert code == 2 and "keys:manage" in err
