"""A tenant's people through the SDK and the CLI (ADR 0043 §5): invited with a role,
listed, read, given another role, sent a one-time sign-in link (shown once, never in a
repr) and disabled; a key without ``keys:manage`` is refused naming the scope."""

from __future__ import annotations

import asyncio

import pytest

from tenantry.client import AsyncClient, Client, Conflict, Forbidden, SignInLink, User
from tests.support.api import Api
from tests.support.cli import cli


async def _key(api: Api, tenant: str, *scopes: str) -> str:
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"scopes": list(scopes)})
    assert r.status_code == 201, r.text
    key: str = r.json()["api_key"]
    return key


async def test_users_through_both_clients(api: Api) -> None:
    tenant, h = await api.tenant()
    key = h["Authorization"].removeprefix("Bearer ")
    async with AsyncClient(api.base_url, key) as client:
        ann = await client.users.invite("ann@acme.example", role="approver")
        assert isinstance(ann, User)
        assert (ann.email, ann.role, ann.scopes, ann.disabled) == (
            "ann@acme.example", "approver", ("approvals:decide", "runs:read"), False)
        assert ann.created_by.startswith("key:")
        with pytest.raises(Conflict):
            await client.users.invite("ANN@acme.example", role="viewer")
        bob = await client.users.invite("bob@acme.example", role="viewer")
        assert [u.user_id for u in await client.users.list()] == [bob.user_id, ann.user_id]
        assert (await client.users.get(ann.user_id)).email == "ann@acme.example"
        admin = await client.users.set_role(ann.user_id, "admin")
        assert admin.role == "admin" and "audit:read" in admin.scopes
        link = await client.users.sign_in_link(ann.user_id)
        assert isinstance(link, SignInLink)
        assert link.url.startswith(f"{api.base_url}/app/sign-in?token=")
        assert link.url not in repr(link)
        async with AsyncClient(api.base_url, await _key(api, tenant, "runs:read")) as reader:
            with pytest.raises(Forbidden) as refused:
                await reader.users.list()
            assert refused.value.extra["scope"] == "keys:manage"

    def blocking() -> None:
        with Client(api.base_url, key) as client:
            gone = client.users.disable(bob.user_id)
            assert gone.disabled and gone.disabled_at is not None
            assert client.users.disable(bob.user_id).disabled_at == gone.disabled_at
            with pytest.raises(Conflict):
                client.users.sign_in_link(bob.user_id)
            page = client.users.list(limit=1)
            assert [u.user_id for u in page] == [bob.user_id] and page.next_cursor

    await asyncio.to_thread(blocking)


async def test_the_cli_invites_lists_changes_links_and_disables_users(api: Api) -> None:
    tenant, h = await api.tenant()
    env = {"TENANTRY_URL": api.base_url,
           "TENANTRY_API_KEY": h["Authorization"].removeprefix("Bearer ")}
    code, out, err = await cli("users", "invite", "ann@acme.example", "--role", "approver",
                               env=env)
    assert code == 0, err
    fields = dict(line.split("\t", 1) for line in out.splitlines()[1:])
    user_id = fields["user_id"]
    assert (fields["email"], fields["role"], fields["scopes"]) == (
        "ann@acme.example", "approver", "approvals:decide runs:read")
    code, out, _ = await cli("users", "list", env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header[:3] == ["user_id", "email", "role"]
    assert [r[:3] for r in rows] == [[user_id, "ann@acme.example", "approver"]]
    code, out, _ = await cli("users", "set-role", user_id, "viewer", env=env)
    assert (code, out.strip()) == (0, f"{user_id} (ann@acme.example) is now viewer")
    code, out, _ = await cli("users", "show", user_id, "--json", env=env)
    assert code == 0 and '"role": "viewer"' in out
    code, out, err = await cli("users", "sign-in-link", user_id, env=env)
    assert code == 0, err
    assert out.strip().startswith(f"{api.base_url}/app/sign-in?token=")
    assert len(out.splitlines()) == 1 and "shown this once" in err  # alone on stdout
    code, out, _ = await cli("users", "disable", user_id, env=env)
    assert (code, out.strip()) == (0, f"disabled {user_id} (ann@acme.example)")

    # Refusals: one line, exit status 2.
    code, out, err = await cli("users", "sign-in-link", user_id, env=env)
    assert (code, out) == (2, "") and "409" in err and "disabled" in err
    code, out, err = await cli("users", "invite", "ann@acme.example", "--role", "viewer",
                               env=env)
    assert (code, out) == (2, "") and "409" in err and len(err.strip().splitlines()) == 1
    reader = {**env, "TENANTRY_API_KEY": await _key(api, tenant, "runs:read")}
    code, out, err = await cli("users", "list", env=reader)
    assert (code, out) == (2, "") and "403" in err and "keys:manage" in err
    assert len(err.strip().splitlines()) == 1
