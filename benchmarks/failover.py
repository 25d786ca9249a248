"""failover: a highly available cell loses its primary's machine under load, five times.

Each trial starts a fresh two-node cell — Patroni with etcd (``scripts/patroni-cell``,
synchronous mode, ttl 10 s) by default, or ``--manager pg_ctl``: a primary and a synchronous
standby (tests/support/pgcell.py) promoted by hand ``--detect-s`` seconds after the death —
then ``tenantry api`` and two ``tenantry worker`` processes at production settings on the
cell's multi-host URL, the fake model server and the MCP effects server in this process, and
100 runs through the API, each making three keyed effects and a 2 s call. Once every run is
inside that call, every process of the primary is SIGKILLed. It then waits for every run to end.

Per trial: ``failover_s`` — from the kill to the first step (ModelReplied or ToolCompleted)
committed on the new primary (its ``created_at``: the same clock on one machine); ``steps
lost`` — steps the old primary had committed (read from it just before the kill) that the
new one lacks (target 0); and the chaos checks (every run finished, every effect once).

Progress goes to stderr; the last stdout line is one JSON object:
``{"failover_s_max", "failover_s_p50", "steps_lost", "trials", "manager", "runs_failed",
"duplicate_effects"}``. Exit status 1 when a step was lost or an invariant broke.

    .venv/bin/python benchmarks/failover.py                    # Patroni, 5 trials
    .venv/bin/python benchmarks/failover.py --manager pg_ctl --detect-s 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from _harness import console, emit
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.harness import (  # noqa: E402
    Verdict,
    verify,
)
from tests.support.outage import ended_at_least, platform_mid_flight  # noqa: E402
from tests.support.pgcell import PRIMARY, PatroniCell, PgCell, connect_to_primary  # noqa: E402
from tests.support.waiting import until  # noqa: E402

RUNS = 100
TENANTS = 2
WORKERS = 2
CONCURRENCY = 50
SLOW_S = 2.0  # every run is inside this call when the primary dies
STEPS = ("ModelReplied", "ToolCompleted")


class PgCtlCell(PgCell):
    """Promoted by hand ``detect_s`` after the death (a failover manager's detection time)."""

    def __init__(self, root: Path, detect_s: float) -> None:
        super().__init__(root)
        self.detect_s = detect_s

    async def lose_primary(self) -> None:
        await super().lose_primary()
        asyncio.get_running_loop().call_later(self.detect_s, self.promote)


@asynccontextmanager
async def servers() -> AsyncIterator[tuple[EffectsMcpServer, FakeModelServer]]:
    async with EffectsMcpServer() as mcp, FakeModelServer() as model:
        yield mcp, model


async def trial(number: int, root: Path, manager: str, detect_s: float) -> dict[str, object]:
    cell: PgCtlCell | PatroniCell = (PatroniCell(root / "cell") if manager == "patroni"
                                     else PgCtlCell(root / "cell", detect_s))
    with cell:
        await cell.wait_synchronous()
        url = cell.url()
        async with servers() as (mcp, model), platform_mid_flight(
            url, root, mcp, model, runs=RUNS, tenants=TENANTS, workers=WORKERS,
            concurrency=CONCURRENCY, slow_s=SLOW_S,
        ) as loaded:
            fleet, runs = loaded.fleet, loaded.runs
            old = await asyncpg.connect(cell.node_dsn(PRIMARY))
            try:
                committed = {(r["run_id"], r["seq"]) for r in await old.fetch(
                    "SELECT run_id, seq FROM run_events WHERE type = ANY($1)", list(STEPS))}
            finally:
                await old.close()
            await cell.lose_primary()
            # After the kill returned: a step whose transaction began later can only have
            # committed on the new primary (one begun just before may be on both).
            killed_at = datetime.now(UTC)
            console.print(f"trial {number}: primary killed with {len(committed)} steps "
                          f"committed")
            new = await connect_to_primary(url)
            try:
                first = await wait_first_step(new, killed_at)
                await until(ended_at_least(new, RUNS), f"all {RUNS} runs end", 300)
                await fleet.stop()
                after = {(r["run_id"], r["seq"]) for r in await new.fetch(
                    "SELECT run_id, seq FROM run_events WHERE type = ANY($1)", list(STEPS))}
                verdict: Verdict = await verify(new, runs, mcp)
            finally:
                await new.close()
    seconds = (first - killed_at).total_seconds()
    lost = len(committed - after)
    console.print(f"trial {number}: first step on the new primary after {seconds:.2f} s; "
                  f"{lost} steps lost; {verdict.counts()}")
    return {"failover_s": seconds, "steps_lost": lost, "failed": verdict.failed,
            "duplicate_effects": verdict.duplicate_effects, "ok": verdict.ok}


async def wait_first_step(conn: asyncpg.Connection, since: datetime) -> datetime:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        first: datetime | None = await conn.fetchval(
            "SELECT min(created_at) FROM run_events WHERE type = ANY($1) AND created_at > $2",
            list(STEPS), since)
        if first is not None:
            return first
        await asyncio.sleep(0.05)
    raise SystemExit("no step was committed on the new primary within 120 s")


async def benchmark(trials: int, manager: str, detect_s: float) -> int:
    results = []
    for number in range(1, trials + 1):
        with tempfile.TemporaryDirectory(prefix="tenantry-failover-") as tmp:
            results.append(await trial(number, Path(tmp), manager, detect_s))
    seconds = sorted(float(str(r["failover_s"])) for r in results)
    lost = sum(int(str(r["steps_lost"])) for r in results)
    emit({"failover_s_max": round(seconds[-1], 2),
          "failover_s_p50": round(statistics.median(seconds), 2),
          "steps_lost": lost, "trials": trials, "manager": manager,
          "runs_failed": sum(int(str(r["failed"])) for r in results),
          "duplicate_effects": sum(int(str(r["duplicate_effects"])) for r in results)})
    return 0 if lost == 0 and all(r["ok"] for r in results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--manager", choices=("patroni", "pg_ctl"), default="patroni")
    parser.add_argument("--detect-s", type=float, default=2.0,
                        help="pg_ctl only: seconds from the death to the promotion")
    args = parser.parse_args()
    return asyncio.run(benchmark(args.trials, args.manager, args.detect_s))


if __name__ == "__main__":
    sys.exit(main())
