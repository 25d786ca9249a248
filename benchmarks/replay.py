"""replay: the release gate — 10,000 varied runs recorded on a real platform, every one
replayed on the current code, and 0 decisions may differ (invariant 11); no call the tool
server received may break its run's tool rules (0 escapes).

Starts its own platform: a fresh migrated database (on ``TENANTRY_DATABASE_URL`` if set, else
an embedded Postgres in a temp dir), the fake model server and the MCP test server each in a
process of their own (their CPU off the workers' event loop), and worker loops in this
process, with bwrap sandboxes for the few scenarios that need one. The runs come from the
scenario table of tests/support/replay_scenarios.py (tests/integration/test_replay_gate.py plays
each scenario of it once): plain and long answers, empty replies, keyed tool calls (several
per reply, errors, malformed calls), keyless calls, unknown outcomes (a worker that dies
after sending a keyless call), approvals granted, denied and expired, runs parked on a model
account that goes down and woken when it comes back, fallback models, cancels, budget stops
on steps, tokens and cost, child runs, summaries, repeats told and stopped, streamed replies,
injected instructions, a tool changed under a published version (its server re-pinned),
evaluations' stand-in results, activities called as tools, and the code and browser tools.
Each run is played to its end; then every run is exported (a page of runs per statement)
and replayed, and every call the MCP server received is checked against its run's
allow-list, approvals and stand-ins (tests/support/escapes.py); every call the rug-pulled
server received counts as an escape.

    .venv/bin/python benchmarks/replay.py               # 10,000 runs: the gate
    .venv/bin/python benchmarks/replay.py --runs 500    # a quick trial

``make gate`` (benchmarks/gate.py) runs this beside the chaos gate after the test suite.
Progress goes to stderr, with the first differences and escapes if there are any; the last
stdout line is one JSON object: ``{"runs", "differences", "escapes", "tool_calls_received",
"ok", "runs_per_s", "generate_s", "export_s", "replay_s", "generated_per_s",
"differing_runs", "by_scenario", "event_types", "missing_marks", ...}`` (``runs``: runs
replayed; ``runs_per_s``: runs replayed per second of replay; ``missing_marks``: per
scenario, runs whose log lacked an event it claims). Exit status 1 when any decision
differs, a call escaped its rules or a scenario's run did not produce its events, 2 when
the platform would not run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx2

from _harness import Bench, console, emit, raise_fd_limit, source_state
from tenantry.testing.mcp_server import ToolCallRecord

# The scenarios and the replay are the gate test's own (tests/support/replay_*.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.replay_gate import generate, replay_corpus
from tests.support.replay_scenarios import SCENARIOS

RUNS = 10_000
WORKERS = int(os.environ.get("REPLAY_WORKERS", "2"))  # worker loops in this process
CONCURRENCY = int(os.environ.get("REPLAY_CONCURRENCY", "100"))  # runs each loop holds
TENANTS = int(os.environ.get("REPLAY_TENANTS", "8"))  # per role (keyed, keyless, ...)
SHOWN_DIFFERENCES = 10


async def gate(bench: Bench, runs: int, seed: int) -> dict[str, Any]:
    source = source_state()  # at the start: HEAD may move during the minutes this takes
    model_proc, mcp_proc = bench.fake_model(), bench.mcp_server()
    database = await bench.database()
    model_url, mcp_url = await asyncio.gather(model_proc.ready(), mcp_proc.ready())
    console.log(f"fake model at {model_url}, MCP server at {mcp_url}; {runs} runs over "
                f"{len(SCENARIOS)} scenarios (seed {seed})")
    corpus = await generate(database.dsn, model_url=model_url, mcp_url=mcp_url, total=runs,
                            seed=seed, workers=WORKERS, concurrency=CONCURRENCY,
                            tenants_per_role=TENANTS, progress=console.log)
    console.log(f"{len(corpus.runs)} runs recorded in {corpus.seconds:.1f} s; replaying")
    received = await server_calls(mcp_url)
    verdict = await replay_corpus(database.dsn, corpus, progress=console.log,
                                  server_calls=received)
    for difference in verdict.differences[:SHOWN_DIFFERENCES]:
        console.print(f"DIFF {difference}", style="red", markup=False)
    for name, missing in verdict.missing_marks.items():
        console.print(f"{len(missing)} {name} run(s) lack an event the scenario claims, "
                      f"e.g. {missing[0]}", style="yellow", markup=False)
    for text in verdict.escapes.examples[:SHOWN_DIFFERENCES]:
        console.print(f"ESCAPE {text}", style="red", markup=False)
    return {
        "runs": verdict.runs,
        "differences": len(verdict.differences),
        "escapes": verdict.escapes.count,
        "tool_calls_received": verdict.escapes.calls,
        "ok": not (verdict.differences or verdict.missing_marks or verdict.escapes.count),
        "runs_per_s": round(verdict.runs / verdict.replay_s, 1) if verdict.replay_s else 0.0,
        "generate_s": round(corpus.seconds, 1),
        "export_s": round(verdict.export_s, 1),
        "replay_s": round(verdict.replay_s, 1),
        "generated_per_s": round(len(corpus.runs) / corpus.seconds, 1),
        "differing_runs": verdict.differing_runs,
        "by_scenario": dict(sorted(corpus.by_scenario().items())),
        "event_types": dict(sorted(verdict.event_types.items())),
        "missing_marks": {name: len(runs) for name, runs in verdict.missing_marks.items()},
        "park_waves": corpus.park_waves,
        "workers": WORKERS,
        "concurrency": CONCURRENCY,
        "tenants": TENANTS * 4,
        "seed": seed,
        "postgres": database.kind,
        "source": source,
    }


async def server_calls(mcp_url: str) -> list[ToolCallRecord]:
    """Every call the MCP test server (its own process) received, as it recorded them."""
    async with httpx2.AsyncClient(timeout=120) as client:
        r = await client.get(mcp_url.removesuffix("/mcp") + "/stats")
        r.raise_for_status()
        return [ToolCallRecord.from_data(c) for c in r.json()["calls"]]


def quiet_logs() -> None:
    # Before the MCP client is built: its SDK would install a rich handler at INFO otherwise.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # Hundreds of runs park on purpose (the outage scenario); a park's warning is noise here.
    logging.getLogger("tenantry.runs.faults").addFilter(
        lambda record: not record.getMessage().startswith("run parked"))


def main() -> int:
    parser = argparse.ArgumentParser(prog="replay.py", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS,
                        help=f"runs to record and replay (at least {len(SCENARIOS)})")
    parser.add_argument("--seed", type=int, default=21, help="which runs (the same plan)")
    args = parser.parse_args()
    if args.runs < len(SCENARIOS):
        parser.error(f"--runs: at least {len(SCENARIOS)}, one per scenario")
    quiet_logs()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM unwinds like Ctrl-C
    raise_fd_limit()
    try:
        with Bench("replay") as bench:
            result = asyncio.run(gate(bench, args.runs, args.seed))
    except RuntimeError as exc:  # a platform that will not start is no figure
        console.print(f"replay failed: {exc}", style="red", markup=False)
        return 2
    except KeyboardInterrupt:
        console.print("replay interrupted; everything it started is stopped", style="yellow")
        return 130
    emit(result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
