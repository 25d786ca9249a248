"""Seeding and reading for the console's charts tests: runs with chosen creation, claim and
end times and usage facts on chosen days, written straight into Postgres as the superuser
(what the engine would have left behind), and the numbers a charts page prints in its
data tables. Nothing here imports pytest."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import unescape

import asyncpg

from tenantry.ids import AgentId, TenantId, uuid7


@dataclass(frozen=True, slots=True)
class SeedRun:
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None  # None: still running (or queued, without started_at)


async def seed_runs(conn: asyncpg.Connection, tenant: TenantId, agent: AgentId,
                    runs: Sequence[SeedRun]) -> None:
    for r in runs:
        status = ("finished" if r.finished_at is not None
                  else "running" if r.started_at is not None else "queued")
        await conn.execute(
            """
            INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, status, input,
                              request_sha256, created_at, started_at, updated_at, finished_at)
            VALUES ($1, $2, $3, 1, $4, '{}'::jsonb, '\\x00'::bytea, $5::timestamptz,
                    $6::timestamptz, coalesce($7::timestamptz, $6, $5), $7)
            """, tenant.value, uuid7(), agent.uuid, status, r.created_at, r.started_at,
            r.finished_at)


async def seed_usage(conn: asyncpg.Connection, tenant: TenantId, agent: AgentId, *,
                     at: datetime, account: str, input_tokens: int, output_tokens: int,
                     cost_micros: int) -> None:
    """One model call's usage fact (on a run of its own) at ``at``."""
    run = uuid7()
    await conn.execute(
        """
        INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, status, input,
                          request_sha256, kind, created_at, updated_at)
        VALUES ($1, $2, $3, 1, 'waiting', '{}'::jsonb, '\\x00'::bytea, 'task', $4, $4)
        """, tenant.value, run, agent.uuid, at)
    await conn.execute(
        """
        INSERT INTO usage_facts (tenant_id, run_id, seq, agent_id, agent_version, provider,
                                 account, model, input_tokens, cached_input_tokens,
                                 cache_write_input_tokens, output_tokens, cost_micros,
                                 price_version, created_at)
        VALUES ($1, $2, 2, $3, 1, 'scripted', $4, 'scripted', $5, 0, 0, $6, $7, 'test', $8)
        """, tenant.value, run, agent.uuid, account, input_tokens, output_tokens, cost_micros,
        at)


_TABLE = re.compile(r'<table class="sr-only chart-data" data-chart="([^"]+)">(.*?)</table>',
                    re.S)
_ROW = re.compile(r'<tr><th scope="row">(.*?)</th>(.*?)</tr>', re.S)
_CELL = re.compile(r'<td data-series="([^"]*)" data-value="([^"]*)">')


def plotted(html: str) -> dict[str, dict[tuple[str, str], float | None]]:
    """Each chart's data table: chart key → (row label, series) → value (None: no value)."""
    found: dict[str, dict[tuple[str, str], float | None]] = {}
    for key, body in _TABLE.findall(html):
        cells: dict[tuple[str, str], float | None] = {}
        for label, row in _ROW.findall(body):
            for series, value in _CELL.findall(row):
                cells[(unescape(label), unescape(series))] = float(value) if value else None
        found[key] = cells
    return found
