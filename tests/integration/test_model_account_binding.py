"""A platform model account's key is bound to where it is sent (ADR 0011): the application
role cannot rewrite an account's base_url, provider or sealed key, and a row whose base_url
was changed anyway (by the owner, a restore, a hand edit) no longer opens its key, so the
server at the new URL never sees it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.models import accounts
from tenantry.testing.fake_model import FakeModelServer
from tenantry.vault import MasterKey, crypto, reseal_legacy_accounts, rotate_master_key
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.scripts import answer, scripted
from tests.support.waiting import until
from tests.support.worker import running_worker


@pytest.fixture
async def providers() -> AsyncIterator[tuple[FakeModelServer, FakeModelServer]]:
    """The account's real provider, and one a hostile party runs."""
    async with FakeModelServer(provider="openai") as honest, \
            FakeModelServer(provider="openai") as hostile:
        yield honest, hostile


@pytest.mark.parametrize(("column", "value"), [
    ("base_url", "http://127.0.0.1:9/steal"), ("provider", "anthropic"),
    ("secret_sealed", b"\x00"), ("master_key_id", "other"), ("secret_binding", 1),
    ("tenant_id", None), ("models", ["*"]),
])
async def test_the_application_role_cannot_rewrite_where_an_account_sends_its_key(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
    providers: tuple[FakeModelServer, FakeModelServer], column: str, value: object,
) -> None:
    honest, _ = providers
    await api.model_account("platform", honest.base_url, secret="sk-platform")
    before = await admin_conn.fetchrow("SELECT * FROM model_accounts")
    async with db.unscoped() as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            # The column name comes from the parameter list above, never from input.
            await conn.execute(f"UPDATE model_accounts SET {column} = $1", value)
    assert await admin_conn.fetchrow("SELECT * FROM model_accounts") == before
    # What the application does update still works: an operator disables the account.
    assert (await accounts.disable(db, "platform")).enabled is False


async def _settled(api: Api, h: dict[str, str], run_id: str) -> bool:
    return (await api.run(h, run_id))["status"] in ("waiting", "failed", "finished")


async def test_a_repointed_account_never_sends_its_key_to_the_new_url(
    api: Api, admin_conn: asyncpg.Connection, database_dsn: str,
    providers: tuple[FakeModelServer, FakeModelServer], caplog: pytest.LogCaptureFixture,
) -> None:
    honest, hostile = providers
    await api.model_account("platform", honest.base_url, secret="sk-platform")
    # Whoever can write the row (here its owner) points it at their own server.
    await admin_conn.execute("UPDATE model_accounts SET base_url = $1", hostile.base_url)
    _, h = await api.tenant("Victim")
    agent = await api.agent(h)
    with caplog.at_level(logging.ERROR, logger="tenantry.models.gateway"):
        async with running_worker(database_dsn, None):
            run = await api.start(h, agent, scripted(answer("never"), text="secret"))
            await until(lambda: _settled(api, h, run), "the run is served or parks", 30)
        status = (await api.run(h, run))["status"]
    # Not the key, not a request at all: the client is made only from an opened key.
    assert [r.api_key for r in hostile.requests] == []
    assert honest.requests == []
    assert status == "waiting"  # parked until an account can serve it
    refused = [r.getMessage() for r in caplog.records
               if "model account refused to serve" in r.getMessage()]
    assert refused and f"at {hostile.base_url}" in refused[0]
    assert "register the account again" in refused[0] and "sk-platform" not in refused[0]


async def test_keys_sealed_before_the_binding_serve_until_resealed_then_are_bound(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
    providers: tuple[FakeModelServer, FakeModelServer],
) -> None:
    honest, hostile = providers
    await api.model_account("platform", honest.base_url, secret="sk-platform")
    # As a key sealed before migration 0015 was: bound to the account id alone.
    legacy = crypto.account_scope("platform", "openai", honest.base_url, crypto.LEGACY_BINDING)
    sealed, nonce = crypto.seal_platform_secret(TEST_MASTER_KEY, legacy, "sk-platform")
    await admin_conn.execute("UPDATE model_accounts SET secret_sealed = $1, secret_nonce = $2,"
                             " secret_binding = 1", sealed, nonce)
    account = await accounts.get_account(db, "platform")
    assert crypto.open_platform_secret(TEST_MASTER_KEY, account.scope,
                                       *account.sealed_secret or (b"", b"")) == "sk-platform"
    # `tenantry migrate` (and `up`) re-seal it with the owner's connection, once.
    assert await reseal_legacy_accounts(admin_conn, TEST_MASTER_KEY) == ["platform"]
    assert await reseal_legacy_accounts(admin_conn, TEST_MASTER_KEY) == []
    account = await accounts.get_account(db, "platform")
    assert account.secret_binding == crypto.ACCOUNT_BINDING
    assert crypto.open_platform_secret(TEST_MASTER_KEY, account.scope,
                                       *account.sealed_secret or (b"", b"")) == "sk-platform"
    # Now bound: the same row pointed elsewhere does not open.
    await admin_conn.execute("UPDATE model_accounts SET base_url = $1", hostile.base_url)
    moved = await accounts.get_account(db, "platform")
    with pytest.raises(crypto.VaultError):
        crypto.open_platform_secret(TEST_MASTER_KEY, moved.scope,
                                    *moved.sealed_secret or (b"", b""))


async def test_rotating_the_master_key_reseals_account_keys_bound_to_where_they_go(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
    providers: tuple[FakeModelServer, FakeModelServer],
) -> None:
    honest, _ = providers
    await api.model_account("bound", honest.base_url, secret="sk-bound")
    await api.model_account("legacy", honest.base_url, secret="sk-legacy")
    legacy = crypto.account_scope("legacy", "openai", honest.base_url, crypto.LEGACY_BINDING)
    sealed, nonce = crypto.seal_platform_secret(TEST_MASTER_KEY, legacy, "sk-legacy")
    await admin_conn.execute("UPDATE model_accounts SET secret_sealed = $1, secret_nonce = $2,"
                             " secret_binding = 1 WHERE account_id = 'legacy'", sealed, nonce)
    new = MasterKey.generate()
    assert await rotate_master_key(admin_conn, TEST_MASTER_KEY, new) == 2
    for account_id, key in (("bound", "sk-bound"), ("legacy", "sk-legacy")):
        account = await accounts.get_account(db, account_id)
        assert account.secret_binding == crypto.ACCOUNT_BINDING
        assert crypto.open_platform_secret(new, account.scope,
                                           *account.sealed_secret or (b"", b"")) == key
