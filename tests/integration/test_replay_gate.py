"""The replay gate (benchmarks/replay.py) at a small scale: every scenario of its table runs
at least once on a real platform, produces the events it claims, and replays on the current
code with no difference. The benchmark runs the same code at 10,000 runs before a release."""

from __future__ import annotations

from pathlib import Path

from tenantry.db import Database
from tenantry.runs.replay import export_run, export_runs
from tests.support.cli import cli
from tests.support.db import console_login_dsn
from tests.support.replay_gate import SCENARIOS, generate, replay_corpus
from tests.support.worker import Fakes

RUNS = 40


async def test_every_scenario_is_recorded_and_replays_without_differences(
    database_dsn: str, fakes: Fakes, db: Database, tmp_path: Path
) -> None:
    corpus = await generate(database_dsn, model_url=fakes.model.base_url,
                            mcp_url=fakes.mcp.url, total=RUNS, workers=1, concurrency=50)
    assert sum(corpus.by_scenario().values()) == RUNS
    assert set(corpus.by_scenario()) == {s.name for s in SCENARIOS}
    verdict = await replay_corpus(database_dsn, corpus)
    assert verdict.runs == RUNS
    assert [str(d) for d in verdict.differences] == []
    # Each scenario's log holds what it is there to cover (an expiry, an unknown outcome...).
    assert verdict.missing_marks == {}
    assert corpus.park_waves >= 1

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
