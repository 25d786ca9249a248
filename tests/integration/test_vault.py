"""The vault against real Postgres: write-only secrets, per-tenant data keys, and master key
rotation by the CLI without re-encrypting secrets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.tenants import service as tenants
from tenantry.vault import MasterKey, Vault, VaultError


async def test_rotate_master_key_rewraps_data_keys(
    db: Database, database_dsn: str, admin_conn: asyncpg.Connection
) -> None:
    old, new = MasterKey.generate(), MasterKey.generate()
    a = (await tenants.create_tenant(db, "A")).tenant_id
    b = (await tenants.create_tenant(db, "B")).tenant_id
    vault = Vault(db, old)
    assert (await vault.put(a, "token", "alpha")).created is True
    assert (await vault.put(a, "token", "alpha-2")).created is False  # replaced
    await vault.put(b, "token", "beta")
    secrets_before = await admin_conn.fetch("SELECT ciphertext FROM secrets ORDER BY tenant_id")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env["TENANTRY_MASTER_KEY"] = old.encoded()
    tenantry = str(Path(sys.executable).parent / "tenantry")
    argv = [tenantry, "vault", "rotate-master-key", "--new-key", new.encoded(),
            "--database-url", database_dsn]

    def rotate() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)

    done = await asyncio.to_thread(rotate)
    assert done.returncode == 0, done.stderr
    assert "re-wrapped 2 tenant key(s)" in done.stdout
    # Secrets were not re-encrypted; only their tenants' keys were re-wrapped.
    assert await admin_conn.fetch("SELECT ciphertext FROM secrets ORDER BY tenant_id") == \
        secrets_before
    assert await Vault(db, new).get(a, "token") == "alpha-2"
    assert await Vault(db, new).get(b, "token") == "beta"
    with pytest.raises(VaultError, match="another master key"):
        await Vault(db, old).get(a, "token")
    # Running it again is harmless.
    again = await asyncio.to_thread(rotate)
    assert again.returncode == 0 and "re-wrapped 0" in again.stdout
