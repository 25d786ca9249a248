from __future__ import annotations

import asyncpg

TABLES = ("tenants", "api_keys", "agents", "agent_versions", "runs", "run_events",
          "model_accounts", "tool_servers", "secrets", "tenant_policies", "approvals")


async def row_counts(conn: asyncpg.Connection) -> dict[str, int]:
    """Rows per table, read as the superuser (no RLS): what was really written."""
    return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}
