"""Refused egress is counted: code in a run's real sandbox that keeps
trying the cloud metadata address and hosts off its allow-list leaves one EgressRefused
event per attempt in the run's log, raises the refused-egress metric, and past the
operator's threshold gets its agent version flagged for review, in the API and the console.
On every backend: the refusals are the host-side proxy's, the same for all, but each
backend's own relay carries the attempts to it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import asyncpg
import pytest

from tenantry.api.console import epoch, session
from tenantry.db import Database
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.blob_stores import directory_blobs
from tests.support.sandbox import ASK_THROUGH_RELAY, TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.worker import TEST_ENGINE, Fakes, running_worker

pytestmark = pytest.mark.timeout(300)

ATTEMPTS = 3  # of each target, per run
THRESHOLD = 10  # two runs of 2 x 3 attempts cross it

TARGETS = ["169.254.169.254:80", "evil.example:443"] * ATTEMPTS
PROBE = ASK_THROUGH_RELAY + f"print(json.dumps([ask(t) for t in {TARGETS!r}]))\n"


def refused_metric(scraped: str, reason: str) -> float:
    found = re.search(rf'^tenantry_egress_refused_total\{{[^}}]*reason="{reason}"[^}}]*\}} '
                      r"(\S+)$", scraped, re.MULTILINE)
    return float(found[1]) if found else 0.0


@pytest.mark.parametrize("driver", ["bwrap", "gvisor", "microvm"], indirect=True)
async def test_refused_egress_is_recorded_counted_and_flags_the_version(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path, admin_conn: asyncpg.Connection,
) -> None:
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=TEST_LIMITS[driver.backend], hibernate_after=0)
    tenant, h = await api.tenant("Prober")
    agent = await api.agent(h, tools=["run_python"], sandbox={"egress": ["api.example.com"]})
    metrics = WorkerMetrics()
    settings = dataclasses.replace(TEST_ENGINE, egress_flag_threshold=THRESHOLD)
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    console = {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager,
                              metrics=metrics, settings=settings):
        flags = []
        for _ in range(2):
            run = await api.start(h, agent, scripted(call("run_python", code=PROBE),
                                                     answer("{last_tool_result}")))
            events = await api.events_until_end(h, run, within=180)
            # The code was told no each time, and the run went on.
            statuses = json.loads(json.loads(str((await api.run(h, run))["answer"]))["stdout"])
            assert all(s.startswith("HTTP/1.1 403 Forbidden") for s in statuses), statuses
            refused = [(e["data"]["key"], e["data"]["host"], e["data"]["port"],
                        e["data"]["reason_code"], e["data"].get("count", 1))
                       for e in events if e["type"] == "EgressRefused"]
            key = next(e["data"]["key"] for e in events if e["type"] == "ToolCompleted")
            assert refused == [(key, "169.254.169.254", 80, "metadata_address", 1),
                               (key, "evil.example", 443, "not_allowed", 1)] * ATTEMPTS
            # Written with the call's result, just before it, by the run's worker.
            kinds = [e["type"] for e in events]
            assert kinds.index("ToolCompleted") == kinds.index("EgressRefused") + 2 * ATTEMPTS
            trace = (await api.client.get(f"/v1/runs/{run}/trace", headers=h)).json()
            assert trace["egress_refused"] == {
                "total": 2 * ATTEMPTS,
                "by_reason": {"metadata_address": ATTEMPTS, "not_allowed": ATTEMPTS}}
            flags.append((await api.client.get(f"/v1/agents/{agent}",
                                               headers=h)).json()["flagged_for_review"])
        scraped = metrics.render()
    assert refused_metric(scraped, "metadata_address") == 2 * ATTEMPTS
    assert refused_metric(scraped, "not_allowed") == 2 * ATTEMPTS
    assert 'tenant_class="' in scraped.split("tenantry_egress_refused_total{", 1)[1]
    assert tenant not in scraped  # classes, never tenant ids
    # 6 attempts: under the threshold; 12: the version is flagged.
    assert flags[0] is None
    flag = flags[1]
    assert flag["reason"] == "egress_refused" and flag["refused_egress"] == 4 * ATTEMPTS
    version = (await api.client.get(f"/v1/agents/{agent}/versions/1", headers=h)).json()
    assert version["flagged_for_review"] == flag
    page = await api.client.get("/console/tenants", headers=console)
    assert page.status_code == 200, page.text
    row = page.text.split(f'<tr data-tenant="{tenant}">', 1)[1].split("</tr>", 1)[0]
    assert f'data-flag="{agent}/1"' in row and "egress_refused" in row
    assert f"{4 * ATTEMPTS} refused egress attempts" in row
    # The log holds what the code asked for and why; never what a name resolved to.
    stored = await admin_conn.fetchval(
        "SELECT string_agg(data::text, ' ') FROM run_events WHERE type = 'EgressRefused'")
    assert "93.184" not in stored and "resolves to" not in stored
