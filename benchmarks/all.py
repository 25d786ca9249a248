"""all: every benchmark, one after another, their JSON lines gathered in one file.

``make bench`` runs this. Each script under ``benchmarks/`` (not the ``_`` helpers, not this
one, not ``gate.py``, which runs two of them again as the release gate) runs with no
arguments as its own process, exactly as its docstring and docs/BENCHMARKS.md say, its
progress going to stderr as it comes; its last stdout line is its one JSON line. This
writes one line per script to ``--out`` (default
``benchmarks/results/<UTC time>-<commit>.jsonl``, created): ``{"benchmark", "commit",
"started", "seconds", "exit", "result"}`` — ``result`` the script's JSON line as an object,
or ``null`` with ``"error"`` when it printed none. A failed script does not stop the rest;
the exit status is 1 when any failed. ``activities.py`` runs once per sandbox backend that
works here (``--backend``), like ``sandbox.py`` reports every backend.

    .venv/bin/python benchmarks/all.py                      # everything (the soak: 30 min)
    .venv/bin/python benchmarks/all.py create_run fairness   # just these
    BENCH_SOAK_MINUTES=3 .venv/bin/python benchmarks/all.py  # a short soak

The whole set takes well over an hour on this 2-core machine, most of it the soak; run it on
a quiet machine (nothing else running), since the figures are compared across commits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def scripts() -> list[str]:
    # gate.py is replay.py and chaos.py again, as the release gate (`make gate`); table.py
    # renders docs/BENCHMARKS.md's table from what this writes.
    return sorted(p.stem for p in HERE.glob("*.py")
                  if not p.name.startswith("_") and p.stem not in ("all", "gate", "table"))


def commit() -> str:
    found = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip() or "unknown"


def runs_of(name: str) -> list[list[str]]:
    """The argument lists one benchmark runs with."""
    if name == "activities":
        from tenantry.config import Settings
        from tenantry.sandbox import probe

        found = probe.detect(Settings())
        return [["--backend", backend] for backend in ("microvm", "gvisor", "bwrap")
                if backend not in found.why_not]
    if name == "soak":
        return [["--minutes", os.environ.get("BENCH_SOAK_MINUTES", "30")]]
    return [[]]


def run_one(name: str, args: list[str]) -> dict[str, object]:
    started = datetime.now(UTC)
    began = time.monotonic()
    print(f"== {name} {' '.join(args)}".rstrip(), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *args],
                          stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    record: dict[str, object] = {
        "benchmark": name if not args else f"{name} {' '.join(args)}", "commit": commit(),
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - began, 1), "exit": done.returncode,
        "result": None}
    try:
        record["result"] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        record["error"] = "no JSON line on stdout"
    return record


def main() -> int:
    parser = argparse.ArgumentParser(prog="all.py", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"some of: {', '.join(scripts())}")
    parser.add_argument("--out", type=Path, help="the JSON-lines file (appended to)")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(scripts()))
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)}")
    out = args.out or (HERE / "results" /
                       f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{commit()}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names or scripts():
        for extra in runs_of(name):
            record = run_one(name, extra)
            failed += record["exit"] != 0 or record["result"] is None
            with out.open("a", encoding="utf-8") as sink:
                sink.write(json.dumps(record) + "\n")
            print(f"== {record['benchmark']}: exit {record['exit']} in {record['seconds']} s "
                  f"-> {out}", file=sys.stderr, flush=True)
    print(f"{failed} failed; results in {out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
