"""Checking a finished run against the replay corpus (tests/replay_corpus), or recording it."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.runs.replay import export_run, replay

CORPUS = Path(__file__).parent.parent / "replay_corpus"


async def check_and_record(db: Database, tenant: str, run_id: str, name: str) -> None:
    """Replay a run made by another test; add it to the corpus when recording."""
    record = await export_run(db, TenantId(tenant), RunId.parse(run_id))
    assert replay(record) == []
    if os.environ.get("TENANTRY_RECORD_CORPUS") == "1":
        (CORPUS / f"{name}.json").write_bytes(
            orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
