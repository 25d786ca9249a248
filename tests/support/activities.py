"""Activities for tests: publish one over HTTP, and look at the tasks a run's tool calls
enqueued (ADR 0015)."""

from __future__ import annotations

import base64
import textwrap
from typing import Any

import asyncpg

from tenantry.ids import RunId
from tests.support.api import Api

#: Returns what the guest saw: its key and its input.
ECHO_KEY = """
def handle(value, context):
    return {"key": context.idempotency_key, "input": value}
"""


async def publish_activity(api: Api, headers: dict[str, str], name: str, code: str,
                           **settings: Any) -> dict[str, Any]:
    body = {"name": name, "entrypoint": "main.py:handle",
            "files": {"main.py": base64.b64encode(textwrap.dedent(code).encode()).decode()},
            "timeout_seconds": 60, **settings}
    r = await api.client.post("/v1/activities", json=body, headers=headers)
    assert r.status_code == 201, r.text
    published: dict[str, Any] = r.json()
    return published


async def tasks_of(admin_conn: asyncpg.Connection, run_id: str) -> list[asyncpg.Record]:
    """The activity tasks whose parent is the run (``run_…`` id), oldest first."""
    return list(await admin_conn.fetch(
        "SELECT r.tenant_id, r.run_id, r.status, r.idempotency_key, p.tenant_id AS parent_tenant"
        " FROM runs r JOIN runs p ON p.tenant_id = r.tenant_id AND p.run_id = r.parent_run_id"
        " WHERE r.kind = 'activity' AND r.parent_run_id = $1 ORDER BY r.created_at",
        RunId.parse(run_id).uuid))
