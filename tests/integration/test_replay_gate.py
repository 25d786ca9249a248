"""The replay gate's scenarios (tests/support/replay_scenarios.py), one run of each, on a real
platform: each produces the events it claims, replays on the current code with no
difference, and no call its tool server received broke its run's rules. `make gate`
(benchmarks/gate.py) plays the same scenarios at 10,000 runs after the suite; this test
keeps them quick to try while they are written, checks what the gate's figures rest on (the
bulk export, `tenantry replay --tenant`, the escape count) and records the corpus.

Set TENANTRY_RECORD_CORPUS=1 to (re)write tests/replay_corpus/gate-<scenario>.json, one run
per scenario (docs/how-to/replay.md, "When a change is intended")."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import asyncpg
import orjson

from tenantry.db import Database
from tenantry.runs.replay import export_run, export_runs
from tenantry.testing.mcp_server import ToolCallRecord
from tests.support.cli import cli
from tests.support.db import console_login_dsn
from tests.support.escapes import count_escapes
from tests.support.replay import CORPUS
from tests.support.replay_gate import generate, replay_corpus
from tests.support.replay_scenarios import SCENARIOS, Started
from tests.support.worker import Fakes

RUNS = len(SCENARIOS)  # one of each


async def test_every_scenario_is_recorded_and_replays_without_differences(
    database_dsn: str, fakes: Fakes, db: Database, admin_conn: asyncpg.Connection,
    tmp_path: Path,
) -> None:
    corpus = await generate(database_dsn, model_url=fakes.model.base_url,
                            mcp_url=fakes.mcp.url, total=RUNS, workers=1, concurrency=50)
    assert corpus.by_scenario() == {s.name: 1 for s in SCENARIOS}
    verdict = await replay_corpus(database_dsn, corpus, server_calls=fakes.mcp.calls)
    assert verdict.runs == RUNS
    assert [str(d) for d in verdict.differences] == []
    # Each scenario's log holds what it is there to cover (an expiry, an unknown outcome...).
    assert verdict.missing_marks == {}
    assert corpus.park_waves >= 1
    # The injected instructions, denied and expired approvals, evaluations' stand-ins: no
    # call the server received broke its run's rules ...
    assert verdict.escapes.examples == [] and verdict.escapes.calls > 0
    # ... and had it received the calls the gateway refused, each would have counted; and so
    # would a call reaching the bank, whose tool changed after every banker was published.
    await _each_broken_rule_counts(admin_conn, {s.name: r for s, r in corpus.runs})
    reached = dataclasses.replace(corpus, bank_calls=[("wire_money", {"amount": 5}, None)])
    assert (await replay_corpus(database_dsn, reached)).escapes.count == 1

    # The bulk export reads exactly what the one-run export reads (payload table included).
    tenant = corpus.runs[0][1].tenant
    ids = [started.run for _, started in corpus.runs if started.tenant == tenant]
    assert await export_runs(db, tenant, ids) == [await export_run(db, tenant, run)
                                                  for run in ids]
    # `tenantry replay --tenant` replays every ended run of the tenant through it.
    code, out, err = await cli("replay", "--tenant", tenant.value, env={
        "TENANTRY_DATABASE_URL": database_dsn, "TENANTRY_DATA_DIR": str(tmp_path),
        "TENANTRY_CONSOLE_DATABASE_URL": console_login_dsn(database_dsn)})
    assert code == 0, err
    assert f"{len(ids)} run(s) replayed, 0 with differences" in out

    if os.environ.get("TENANTRY_RECORD_CORPUS") == "1":
        for scenario, started in corpus.runs:
            record = await export_run(db, started.tenant, started.run)
            name = scenario.name.replace("_", "-")
            (CORPUS / f"gate-{name}.json").write_bytes(
                orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")


async def _each_broken_rule_counts(conn: asyncpg.Connection, runs: dict[str, Started]
                                   ) -> None:
    """What the gate's "0 escapes" rests on: calls as the server would have recorded them,
    with the keys of calls the gateway refused or stood in for, each count as an escape."""

    async def key(scenario: str, tool: str) -> str:
        """The key of the run's first completed call of ``tool``."""
        found: str = await conn.fetchval(
            "SELECT data->>'key' FROM run_events WHERE run_id = $1 AND type = "
            "'ToolCompleted' AND data->>'tool' = $2 ORDER BY seq LIMIT 1",
            runs[scenario].run.uuid, tool)
        return found

    def received(tool: str, key: str | None) -> ToolCallRecord:
        return ToolCallRecord(tool, {}, key, key, None)

    made = received("effect", await key("approval_granted", "effect"))
    assert (await count_escapes(conn, [made])).count == 0  # approved: it may be made
    broken = [received("effect", await key("injected_instruction", "effect")),
              received("effect", await key("approval_denied", "effect")),
              received("effect", await key("approval_expired", "effect")),
              received("effect", await key("evaluation", "effect")),  # recorded: stood in
              received("effect", None)]
    found = await count_escapes(conn, broken)
    assert found.count == len(broken), found.examples
    assert [text.split("' ", 1)[1] for text in found.examples] == [
        "is not on the run's allow-list ['echo']",
        "needs an approval; none approved it",
        "needs an approval; none approved it",
        "was stood in for (an evaluation run), yet called",
        "carries no key of a run"]
