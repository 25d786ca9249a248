"""`tenantry up --demo`'s API key across restarts on one data dir: kept while it works,
replaced (and said so) once it does not — never a key the banner shows that fails."""

from __future__ import annotations

from pathlib import Path

from tenantry.bootstrap.banner import banner
from tenantry.bootstrap.demo import DEMO_TENANT, ensure_demo
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.tenants import service as tenants


async def test_a_restart_keeps_the_demo_key_and_a_revoked_one_is_replaced_aloud(
    database_dsn: str, db: Database, tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    first = await ensure_demo(database_dsn, settings)
    assert first.key_is == "new"
    assert (tmp_path / "demo_api_key").stat().st_mode & 0o077 == 0  # the owner's only

    again = await ensure_demo(database_dsn, settings)
    assert (again.key_is, again.api_key, again.agent_id) == ("kept", first.api_key,
                                                             first.agent_id)
    assert (await tenants.authenticate(db, first.api_key)).tenant == DEMO_TENANT
    assert "kept in the data dir" in banner("http://h", None, again, "embedded")

    [live] = [k for k in await tenants.list_api_keys(db, DEMO_TENANT) if k.revoked_at is None]
    await tenants.revoke_api_key(db, DEMO_TENANT, live.key_id)
    rotated = await ensure_demo(database_dsn, settings)
    assert rotated.key_is == "rotated" and rotated.api_key != first.api_key
    assert (await tenants.authenticate(db, rotated.api_key)).tenant == DEMO_TENANT
    shown = banner("http://h", None, rotated, "embedded")
    assert f"api key: {rotated.api_key}  (NEW: the kept key no longer worked" in shown
    assert (tmp_path / "demo_api_key").read_text() == rotated.api_key
    # Still one live demo key.
    assert len([k for k in await tenants.list_api_keys(db, DEMO_TENANT)
                if k.revoked_at is None]) == 1
