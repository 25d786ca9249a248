"""soak: 30 minutes of mixed load on one ``tenantry up``; memory and descriptors must stay flat.

Starts ONE ``tenantry up`` process (API and one worker loop; data dir in a temp dir; on a fresh
database at ``TENANTRY_DATABASE_URL`` if set, else the embedded Postgres ``up`` starts in its
data dir), with model calls going to the fake OpenAI-format provider
(``tenantry.testing.fake_model``) in its own process on a fixed loopback port, the MCP test
server (keyed ``effect`` tool) in its own process, and a webhook receiver in this process.
Sandboxes: whatever backend the platform probes (the machine's built guest image is used if
there is one, as ``tenantry sandbox build-image`` left it; ``TENANTRY_SANDBOX_BACKEND``
forces one). Three tenants (the third capped at 6 running runs) get the mixed load of
``_soak_load.py`` — tools, approvals decided through the API, cancels, sandboxes, webhooks,
SSE watchers — through the real HTTP API at ``SOAK_RATE`` runs/s (1.5), at most
``SOAK_IN_FLIGHT`` (40) unfinished at once. Every ~5 minutes (a third of a short run) the
provider is stopped for 20-30 s and started again on the same port: runs park and wake.

Every 10 s the resident memory (PSS: shared pages split among their sharers, see
``_soak_procs.py``; plain VmRSS beside it) and open file descriptors of every platform
process are summed: the ``tenantry up`` process, all its descendants (sandbox programs),
the embedded postmaster and all its backends, and strays naming the data dir. After
``--minutes`` (30) it drains: no new runs, every pending approval approved, the provider
brought back, every run followed until it ends (at most 5 minutes) and its webhook
delivered (at most 1 more); then it reads every run once more and stops the platform.

The last stdout line is one JSON object: ``minutes``; ``rss_mib_per_hour`` and
``fds_per_hour``, the least-squares slope of the summed resident memory (PSS) and
descriptors over the last two-thirds of the load (the last 20 of 30 minutes); ``errors``,
the platform log's lines at level error/critical or carrying a traceback; ``runs_lost``,
created (202) runs that did not end, are missing, or ended ``failed`` with ``ours: true``
(a platform fault counts as lost); plus ``runs``, ``statuses``, per-group trends,
``postgres_errors`` (ERROR/FATAL/PANIC lines of the embedded Postgres's log), webhook,
stream and effect checks. Exit status 1 when a run was lost or the log has errors.
``SOAK_SEED`` replays a plan (timing still varies); ``SOAK_LOG_DIR`` keeps logs and samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx2
import orjson

from _harness import (
    Bench,
    Helper,
    console,
    emit,
    env_positive,
    raise_fd_limit,
    source_state,
    wait_for,
)
from _soak_load import Load, Webhooks, provision
from _soak_platform import (
    OPERATOR_TOKEN,
    LogWatch,
    Provider,
    outage_schedule,
    port_outside_ephemeral_range,
    start_platform,
    stop_platform,
    wait_healthy,
)
from _soak_procs import Sample, postgres_errors, sample, trend
from tenantry.models.loopback import LoopbackServer

TENANTS = ["soak-a", "soak-b", "soak-c"]
SAMPLE_EVERY_S = 10.0
PROGRESS_EVERY_S = 60.0
DRAIN_TIMEOUT_S = 300.0
WEBHOOK_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class Config:
    minutes: float
    rate: float
    in_flight: int
    seed: int

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    @property
    def window_start_s(self) -> float:
        return self.seconds / 3  # the slope is taken over the last two-thirds


def _config(argv: list[str]) -> Config:
    parser = argparse.ArgumentParser(prog="soak.py", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="minutes of load before the drain (default 30)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    return Config(args.minutes, env_positive("SOAK_RATE", 1.5),
                  int(env_positive("SOAK_IN_FLIGHT", 40)),
                  int(os.environ.get("SOAK_SEED") or random.randrange(2**32)))


# -- sampling and progress ---------------------------------------------------------------


async def sampler(platform: Helper, data_dir: Path, t0: float, samples: list[Sample]) -> None:
    while True:
        at = time.monotonic() - t0
        samples.append(await asyncio.to_thread(sample, at, platform.pid, data_dir))
        await asyncio.sleep(max(0.0, t0 + at + SAMPLE_EVERY_S - time.monotonic()))


def _status_line(load: Load, samples: list[Sample], provider: Provider, log: LogWatch,
                 t0: float) -> str:
    unfinished = Counter(r.status or "new" for r in load.unfinished)
    last = samples[-1] if samples else None
    memory = ""
    if last is not None:
        g = last.groups
        memory = (f"PSS {last.total.pss_kib / 1024:.0f} MiB (platform "
                  f"{g['platform'].pss_kib / 1024:.0f}, postgres {g['postgres'].pss_kib / 1024:.0f}"
                  f" in {g['postgres'].processes}, children {g['children'].pss_kib / 1024:.0f} "
                  f"in {g['children'].processes}), fds {last.total.fds}; ")
    return (f"{(time.monotonic() - t0) / 60:5.1f} min: {load.counts.created} runs created, "
            f"{len(load.unfinished)} unfinished {dict(unfinished)}; {memory}provider "
            f"{'up' if provider.up else 'DOWN'} ({provider.outages} outages); "
            f"{len(log.read())} error lines")


async def progress(load: Load, samples: list[Sample], provider: Provider, log: LogWatch,
                   t0: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        console.log(_status_line(load, samples, provider, log, t0), markup=False)


async def _until(deadline: float, platform: Helper) -> None:
    while time.monotonic() < deadline:
        if platform.proc.poll() is not None:
            raise RuntimeError(f"tenantry up exited with {platform.proc.returncode} during "
                               f"the soak:\n{platform.tail()}")
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


# -- the benchmark -----------------------------------------------------------------------


async def soak(bench: Bench, config: Config) -> dict[str, Any]:
    # SIGTERM cancels the soak like Ctrl-C does (asyncio.run cancels the main task): the
    # finally below stops everything in order, the webhook receiver's server included.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    rng = random.Random(config.seed)
    data_dir = bench.workdir / "platform"
    database = await bench.database() if os.environ.get("TENANTRY_DATABASE_URL") else None
    provider = Provider(bench, port_outside_ephemeral_range())
    mcp = bench.mcp_server()
    model_url = await provider.start()
    mcp_url = await mcp.ready()
    port = port_outside_ephemeral_range()
    platform = start_platform(bench, data_dir, port, model_url,
                              database.dsn if database else None)
    hooks = Webhooks({})
    receiver = LoopbackServer(hooks.app())
    await receiver.start()
    log = LogWatch(platform.stderr)
    samples: list[Sample] = []
    tasks: list[asyncio.Task[Any]] = []
    base = f"http://127.0.0.1:{port}"
    load: Load | None = None
    try:
        async with httpx2.AsyncClient(base_url=base, timeout=60, trust_env=False) as http:
            await wait_healthy(http, platform)
            tenants = await provision(http, OPERATOR_TOKEN, mcp_url, TENANTS)
        hooks.secrets.update({t.name: t.webhook_secret for t in tenants})
        console.log(f"tenantry up (pid {platform.pid}) at {base}; {len(tenants)} tenants; "
                    f"{config.minutes:g} min of load at {config.rate:g} runs/s, at most "
                    f"{config.in_flight} unfinished (SOAK_SEED={config.seed})")
        load = Load(base, tenants, f"http://127.0.0.1:{receiver.port}", rate=config.rate,
                    in_flight=config.in_flight, seed=config.seed)
        schedule = outage_schedule(config.seconds, rng)
        stop_creating, stop_approving = asyncio.Event(), asyncio.Event()
        t0 = time.monotonic()
        tasks = [asyncio.create_task(sampler(platform, data_dir, t0, samples)),
                 asyncio.create_task(progress(load, samples, provider, log, t0))]
        outages = asyncio.create_task(provider.outages_until(schedule, t0))
        approvers = [asyncio.create_task(load.approver(t, stop_approving)) for t in tenants]
        creating = asyncio.create_task(load.generate(stop_creating))
        tasks += [outages, creating, *approvers]
        await _until(t0 + config.seconds, platform)

        console.log("draining: no new runs, approving what waits, provider up")
        stop_creating.set()
        load.draining = True
        outages.cancel()
        await asyncio.gather(outages, creating, return_exceptions=True)
        if not provider.up:
            await provider.start()
        drained = await load.wait_all(DRAIN_TIMEOUT_S)
        stop_approving.set()
        await asyncio.gather(*approvers, return_exceptions=True)
        drain_s = time.monotonic() - t0 - config.seconds
        await load.verify()
        hooked = [r for r in load.runs if r.webhook and r.ended_seen]
        with contextlib.suppress(RuntimeError):  # missing deliveries are counted below
            await wait_for(lambda: all(hooks.delivered[r.run_id or ""] for r in hooked),
                           within=WEBHOOK_WAIT_S, what="webhooks", every=1.0)
        backends = await load.sandbox_backends()
        effects = await _effects(mcp_url)
        after_drain = await asyncio.to_thread(sample, time.monotonic() - t0, platform.pid,
                                              data_dir)
        console.log(_status_line(load, samples, provider, log, t0), markup=False)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if load is not None:
            await load.aclose()
        await receiver.stop()
        exit_status = await asyncio.to_thread(stop_platform, platform, data_dir)
        _keep_logs(platform, data_dir, samples)
    errors = log.read()
    pg_log = data_dir / "postgres.log"
    pg_errors = postgres_errors(pg_log.read_text(errors="replace").splitlines()
                                if pg_log.exists() else [])
    for line in errors[:20]:
        console.log(f"[red]platform log: {line[:600]}", markup=False, highlight=False)
    for line in pg_errors[:10]:
        console.log(f"postgres log: {line[:400]}", markup=False, highlight=False)
    assert load is not None  # provisioning failed otherwise, and that raised
    return _result(config, load, samples, after_drain, provider, hooks, hooked, log,
                   pg_errors, backends, effects, drained, drain_s, exit_status,
                   "external" if database else "embedded")


def _keep_logs(platform: Helper, data_dir: Path, samples: list[Sample]) -> None:
    """SOAK_LOG_DIR=<dir>: copy the platform's and Postgres's logs there before the temp
    dir goes (to read what an error line was about), and every sample (samples.jsonl)."""
    target = os.environ.get("SOAK_LOG_DIR")
    if not target:
        return
    keep = Path(target)
    keep.mkdir(parents=True, exist_ok=True)
    for path in (platform.stdout, platform.stderr, data_dir / "postgres.log"):
        if path.exists():
            shutil.copy(path, keep / path.name)
    with (keep / "samples.jsonl").open("wb") as out:
        for s in samples:
            out.write(orjson.dumps({"at_s": round(s.at_s, 1), "programs": s.programs,
                                    **{g: asdict(u) for g, u in s.groups.items()}}) + b"\n")
    console.log(f"logs and samples copied to {keep}")


async def _effects(mcp_url: str) -> dict[str, int]:
    """The MCP server's own count of effects performed twice for one key (must be 0)."""
    async with httpx2.AsyncClient(trust_env=False, timeout=30) as http:
        stats = (await http.get(mcp_url.removesuffix("/mcp") + "/stats",
                                params={"calls": "false"})).json()
    return {"effects": stats["effects_total"], "duplicate_effects": stats["duplicate_effects"]}


def _result(config: Config, load: Load, samples: list[Sample], after_drain: Sample,
            provider: Provider, hooks: Webhooks, hooked: list[Any], log: LogWatch,
            pg_errors: list[str], backends: Counter[str], effects: dict[str, int],
            drained: bool, drain_s: float, exit_status: int | None,
            postgres: str) -> dict[str, Any]:
    statuses = Counter(r.status or "unknown" for r in load.runs)
    lost = [r for r in load.runs
            if r.status not in ("finished", "failed", "cancelled")
            or (r.status == "failed" and bool((r.error or {}).get("ours")))]
    for run in lost[:10]:
        console.log(f"[red]lost: {run.run_id} ({run.kind}) status {run.status} "
                    f"error {run.error}")
    window = [s for s in samples
              if config.window_start_s <= s.at_s <= config.seconds + SAMPLE_EVERY_S / 2]
    total = trend(window, None)
    result = {
        "minutes": config.minutes,
        "rss_mib_per_hour": total.get("rss_mib_per_hour", 0.0),
        "fds_per_hour": total.get("fds_per_hour", 0.0),
        "errors": len(log.errors),
        "runs_lost": len(lost),
        "runs": load.counts.created,
        "statuses": dict(statuses),
        "failed_not_ours": sum(1 for r in load.runs if r.status == "failed"
                               and not (r.error or {}).get("ours")),
        "kinds": dict(Counter(r.kind for r in load.runs)),
        **{k: v for k, v in total.items() if k not in ("rss_mib_per_hour", "fds_per_hour")},
        "by_group": {g: trend(window, g) for g in ("platform", "children", "postgres",
                                                   "strays")},
        "rss_mib_after_drain": round(after_drain.total.pss_kib / 1024, 1),
        "fds_after_drain": after_drain.total.fds,
        "children_programs_end": samples[-1].programs if samples else {},
        "window_min": [round(config.window_start_s / 60, 1), config.minutes],
        "samples": len(window),
        "postgres_errors": len(pg_errors),
        "log_lines": log.lines,
        "parks": log.warnings["run parked"],
        "warnings": dict(log.warnings.most_common(8)),
        "drained": drained,
        "drain_s": round(drain_s, 1),
        "outages": provider.outages,
        "provider_down_s": round(provider.down_s, 1),
        "refused": dict(load.counts.refused),
        "create_retries": load.counts.create_retries,
        "cancels": dict(load.counts.cancels),
        "decisions": dict(load.counts.decisions),
        "decision_conflicts": load.counts.decision_conflicts,
        "webhook_runs": len(hooked),
        "webhooks_missing": sum(1 for r in hooked if not hooks.delivered[r.run_id]),
        "webhook_retries_forced": sum(hooks.refused.values()),
        "webhook_bad_signatures": hooks.bad_signatures,
        "streams": load.counts.streams,
        "stream_gaps": load.counts.stream_gaps,
        "stream_errors": load.counts.stream_errors,
        "poll_errors": load.counts.poll_errors,
        "sandbox_calls": dict(backends),
        **effects,
        "platform_exit": exit_status,
        "rate_per_s": config.rate,
        "in_flight_max": config.in_flight,
        "seed": config.seed,
        "postgres": postgres,
        "source": source_state(),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    config = _config(sys.argv[1:] if argv is None else argv)
    raise_fd_limit()
    try:
        with Bench("soak") as bench:
            result = asyncio.run(soak(bench, config))
    except RuntimeError as exc:
        console.print(f"soak failed: {exc}", style="red", markup=False)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("soak interrupted; everything it started is stopped", style="yellow")
        return 130
    emit(result)
    return 1 if result["runs_lost"] or result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
