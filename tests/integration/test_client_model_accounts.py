"""A tenant's own model provider accounts (bring your own key) through the SDK and the
CLI: registered, listed, read, given a new key and disabled. The key goes in and never
comes out — not in an answer, a repr, or anything the CLI prints — and the CLI reads it
from standard input, never an argument; a key without ``integrations:manage`` is refused
naming the scope."""

from __future__ import annotations

import asyncio

import pytest

from tenantry.client import AsyncClient, Client, Conflict, Forbidden, ModelAccount, NotFound
from tests.support.api import Api
from tests.support.cli import cli

# Loopback (the tests' API lets tenants use this machine); registering sends nothing to it.
BASE_URL = "http://127.0.0.1:9/v1"


async def _key(api: Api, tenant: str, *scopes: str) -> str:
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"scopes": list(scopes)})
    assert r.status_code == 201, r.text
    key: str = r.json()["api_key"]
    return key


async def test_own_accounts_through_both_clients(api: Api) -> None:
    tenant, h = await api.tenant()
    key = h["Authorization"].removeprefix("Bearer ")
    async with AsyncClient(api.base_url, key) as client:
        account = await client.model_accounts.register(
            provider="openai", base_url=BASE_URL, models=["scripted"], region="us",
            api_key="sk-own-1", rpm=600, priority=-3)
        assert isinstance(account, ModelAccount)
        assert (account.provider, account.base_url, account.models, account.region,
                account.rpm, account.tpm, account.priority) == (
            "openai", BASE_URL, ("scripted",), "us", 600, None, -3)
        assert (account.tenant_id, account.registered_by, account.enabled) == (
            tenant, "tenant", True)
        assert account.has_secret and account.secret == f"model-account.{account.account_id}"
        assert "sk-own" not in repr(account) and "sk-own" not in str(dict(account.raw))
        assert [a.account_id for a in await client.model_accounts.list()] == [
            account.account_id]
        assert await client.model_accounts.get(account.account_id) == account
        rotated = await client.model_accounts.rotate_key(account.account_id, "sk-own-2")
        assert rotated.account_id == account.account_id
        with pytest.raises(Conflict) as no_price:
            await client.model_accounts.register(
                provider="anthropic", base_url=BASE_URL, models=["no-such-model"],
                region="us", api_key="sk-own-3")
        assert "price" in no_price.value.detail
        async with AsyncClient(api.base_url, await _key(api, tenant, "runs:read")) as reader:
            assert len(await reader.model_accounts.list()) == 1  # reading needs runs:read
            with pytest.raises(Forbidden) as refused:
                await reader.model_accounts.register(
                    provider="openai", base_url=BASE_URL, models=["scripted"], region="us",
                    api_key="sk-own-4")
            assert refused.value.extra["scope"] == "integrations:manage"

    def blocking() -> None:
        with Client(api.base_url, key) as client:
            disabled = client.model_accounts.disable(account.account_id)
            assert disabled.enabled is False
            with pytest.raises(NotFound):
                client.model_accounts.get(account.account_id)
            [listed] = client.model_accounts.list()
            assert (listed.account_id, listed.enabled) == (account.account_id, False)
            assert list(client.secrets.list()) == []  # its key went with it

    await asyncio.to_thread(blocking)


async def test_the_cli_registers_lists_shows_rotates_and_removes_an_account(api: Api) -> None:
    tenant, h = await api.tenant()
    env = {"TENANTRY_URL": api.base_url,
           "TENANTRY_API_KEY": h["Authorization"].removeprefix("Bearer ")}
    register = ("model-accounts", "register", "--provider", "openai", "--base-url", BASE_URL,
                "--model", "scripted", "--model", "family/*", "--region", "us",
                "--rpm", "600")
    # No key on standard input: refused before anything is sent.
    code, out, err = await cli(*register, env=env, stdin="")
    assert (code, out) == (2, "") and "empty" in err and len(err.strip().splitlines()) == 1
    code, out, err = await cli(*register, env=env, stdin="sk-cli-1\n")
    assert code == 0, err
    fields = dict(line.split("\t", 1) for line in out.splitlines()[1:])
    account_id = fields["account_id"]
    assert (fields["provider"], fields["base url"], fields["models"], fields["rpm"],
            fields["enabled"], fields["registered by"]) == (
        "openai", BASE_URL, "scripted family/*", "600", "yes", "tenant")
    assert "sk-cli" not in out + err
    code, out, _ = await cli("model-accounts", "list", env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header[:3] == ["account_id", "provider", "base url"]
    assert [(r[0], r[8]) for r in rows] == [(account_id, "yes")]
    code, out, _ = await cli("model-accounts", "show", account_id, "--json", env=env)
    assert code == 0 and f'"account_id": "{account_id}"' in out and "sk-cli" not in out
    code, out, err = await cli("model-accounts", "rotate-key", account_id, env=env,
                               stdin="sk-cli-2\n")
    assert (code, out.strip()) == (0, f"replaced the key of {account_id}"), err

    # A key without integrations:manage: one line naming the scope, nothing changed.
    reader = {**env, "TENANTRY_API_KEY": await _key(api, tenant, "runs:read")}
    code, out, err = await cli("model-accounts", "remove", account_id, env=reader)
    assert (code, out) == (2, "") and "403" in err and "integrations:manage" in err
    assert len(err.strip().splitlines()) == 1

    code, out, _ = await cli("model-accounts", "remove", account_id, env=env)
    assert (code, out.strip()) == (0, f"removed model account {account_id}")
    code, out, err = await cli("model-accounts", "show", account_id, env=env)
    assert code == 2 and "404" in err and len(err.strip().splitlines()) == 1
    code, out, _ = await cli("model-accounts", "list", env=reader)
    assert code == 0 and [line.split("\t")[8] for line in out.splitlines()[1:]] == ["no"]
