"""gate: the design's release gates at full size, as CI runs them (`make gate`; `make test`
runs it after the suite).

1. **Replay** (benchmarks/replay.py, invariant 11): 10,000 runs over the replay gate's
   scenarios recorded on a real platform and replayed on the current code — 0 differences.
2. **Chaos** (benchmarks/chaos.py, invariants 1-3): 1,000 runs while worker processes are
   SIGKILLed — every run finished, 0 duplicate effects, no gap, no step twice.
3. **Tool rules**, in both: every call the MCP test server received is checked against the
   rules of the run that made it (allow-list, approvals, evaluations' stand-ins;
   tests/support/escapes.py), and the replay gate's rug-pulled server counts every call it
   receives (pins) — 0 escapes. The replay gate's injected-instruction, browser, denied and
   expired approval, evaluation and rug-pulled runs ask for calls the gateway must refuse or
   stand in for; a fifth of the chaos runs call a tool their agent may not use, as injected
   text asks, while workers die around them.

Each gate runs on a platform of its own (a fresh database on ``TENANTRY_DATABASE_URL`` if set,
else an embedded Postgres in a temp dir), one after the other, both whatever the first
found. Their progress goes to stderr, then a summary of both (runs replayed, differences,
runs killed-over, kills, duplicate effects, escapes, seconds) that a CI log shows plainly;
the last stdout line is one JSON object, ``{"ok", "commit", "seconds", "replay": {...},
"chaos": {...}}``, each gate's object its benchmark's own JSON line. Exit status 0 when
both passed, 1 when either found a difference, an unfinished run, a repeated effect, an
escape (or a scenario's run lacked the events it claims), 2 when a platform would not start.

    .venv/bin/python benchmarks/gate.py                                  # the gates
    .venv/bin/python benchmarks/gate.py --replay-runs 500 --chaos-runs 100   # a trial only
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import Any

import chaos
import replay
from _harness import Bench, console, emit, raise_fd_limit, source_state


def _run(name: str, play: Any) -> tuple[dict[str, Any] | None, float, str | None]:
    """One gate on a platform of its own: its figures (None if the platform would not
    start), its wall seconds (platform start and teardown included), and why it failed."""
    console.rule(f"{name} gate", style="bold")
    began = time.monotonic()
    try:
        with Bench(name) as bench:
            result: dict[str, Any] = asyncio.run(play(bench))
    except RuntimeError as exc:  # a platform that will not start: no figure at all
        return None, time.monotonic() - began, f"{type(exc).__name__}: {exc}"
    return result, time.monotonic() - began, None


def _summary(commit: str, replayed: dict[str, Any] | None, chaotic: dict[str, Any] | None,
             seconds: dict[str, float], errors: dict[str, str | None]) -> list[str]:
    lines = [f"== release gates at {commit} " + "=" * 50]
    if replayed is None:
        lines.append(f"replay  DID NOT RUN: {errors['replay']}")
    else:
        lines.append(
            f"replay  {'PASS' if replayed['ok'] else 'FAIL'}  {replayed['runs']:,} runs "
            f"replayed, {replayed['differences']} differences "
            f"({replayed['differing_runs']} runs), {replayed['escapes']} escapes of "
            f"{replayed['tool_calls_received']:,} tool calls received, "
            f"{sum(replayed['missing_marks'].values())} runs missing their scenario's "
            f"events; {len(replayed['by_scenario'])} scenarios; generated in "
            f"{replayed['generate_s']} s, replayed in {replayed['replay_s']} s; "
            f"{seconds['replay']:.1f} s in all")
    if chaotic is None:
        lines.append(f"chaos   DID NOT RUN: {errors['chaos']}")
    else:
        lines.append(
            f"chaos   {'PASS' if chaotic['ok'] else 'FAIL'}  {chaotic['runs']:,} runs, "
            f"{chaotic['finished']:,} finished ({chaotic['runs'] - chaotic['finished']} not), "
            f"{chaotic['kills']} kills ({chaotic['resumed_runs']} runs moved to another "
            f"worker), {chaotic['duplicate_effects']} duplicate effects, "
            f"{chaotic['gaps']} gaps, {chaotic['escapes']} escapes of "
            f"{chaotic['tool_calls_received']:,} tool calls received "
            f"({chaotic['refused_calls']} of {chaotic['forbidden_calls']} forbidden calls "
            f"refused); runs ended in {chaotic['seconds']} s; {seconds['chaos']:.1f} s in all")
    ok = bool(replayed and replayed["ok"] and chaotic and chaotic["ok"])
    lines.append(f"gates   {'PASS' if ok else 'FAIL'} in {sum(seconds.values()):.1f} s")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="gate.py", description=__doc__.split("\n")[0])
    parser.add_argument("--replay-runs", type=int, default=replay.RUNS,
                        help=f"replay gate runs (the gate: {replay.RUNS:,})")
    parser.add_argument("--chaos-runs", type=int, default=chaos.RUNS,
                        help=f"chaos gate runs (the gate: {chaos.RUNS:,})")
    parser.add_argument("--seed", type=int, default=21, help="the replay gate's plan")
    args = parser.parse_args()
    replay.quiet_logs()
    chaos.quiet_logs()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM unwinds like Ctrl-C
    raise_fd_limit()
    full = args.replay_runs == replay.RUNS and args.chaos_runs == chaos.RUNS
    commit = source_state()  # what is measured: HEAD may move during the minutes it takes
    try:
        replayed, replay_s, replay_error = _run(
            "replay", lambda bench: replay.gate(bench, args.replay_runs, args.seed))
        chaotic, chaos_s, chaos_error = _run(
            "chaos", lambda bench: chaos.chaos(bench, args.chaos_runs))
    except KeyboardInterrupt:
        console.print("gate interrupted; everything it started is stopped", style="yellow")
        return 130
    seconds = {"replay": replay_s, "chaos": chaos_s}
    lines = _summary(commit, replayed, chaotic, seconds,
                     {"replay": replay_error, "chaos": chaos_error})
    if not full:
        lines.append("(a trial at a reduced size: not the release gate)")
    # Plain lines, not rich: a CI log shows them as they are, unwrapped.
    print("\n".join(lines), file=sys.stderr, flush=True)
    ok = bool(replayed and replayed["ok"] and chaotic and chaotic["ok"])
    emit({"ok": ok, "full_size": full, "commit": commit,
          "seconds": round(sum(seconds.values()), 1), "replay": replayed, "chaos": chaotic})
    if replayed is None or chaotic is None:
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
