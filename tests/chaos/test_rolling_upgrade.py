"""A rolling upgrade from the previous release to this code, under load, in the
order docs/how-to/upgrade.md gives an operator.

The previous release (tests/support/previous_release.py: the newest ``v*`` tag, else
75566d2 — 0.1.0, the commit before the routines refactor) is built from git history into a
virtualenv of its own (tests/support/release_venv.py, cached by commit). On a new database
migrated by *its* ``tenantry migrate``, its API, two workers and activity dispatcher serve
load through HTTP (tests/support/rolling.py): runs calling a keyed tool on a real MCP
server, runs waiting for a person's approval, parents starting child runs, runs calling
an activity and activity tasks (on bubblewrap sandboxes). While all that runs, this code's
``tenantry migrate`` expands the schema under it, and its workers go on alone on the new
schema, taking four runs they hold in flight (their second step waits at the model); this
code's API, two workers and dispatcher start beside it; its processes are stopped one at
a time (SIGTERM; the API leaves the load balancer's pool first; the workers hand their
runs in flight back to this release's) while the load goes on through whichever APIs are
in the pool — both during the overlap. Every answer of every API is recorded: none is a
5xx, none missing.

Then the approvals requested under the previous release are decided through the new API
and apply; every run finishes (none failed by us), every keyed effect happened exactly
once, children finished and their parents got their answers. The rollback direction: this
release's worker SIGKILLed while it holds runs, with only a worker of the previous release
left, which takes them over and finishes them from what the new one wrote — or, had this
code written an event format the previous release does not know, leaves them for a newer
worker (ADR 0010; between 0.1.0 and this code no format changed). Last, ``tenantry migrate
--contract`` is refused while a process of the previous release is connected and applies
once none is. After it the previous release is refused: a release of 0.2.0 or later at
start, in one line. 0.1.0 checks nothing at start, so contract step 0001 answers its
worker's (and dispatcher's) registration with one line, which it logs as it waits to
register: it stays up and claims nothing. 0.1.0's API is not refused — step 0001 removed
nothing it uses — and a run it accepts is run by this release's workers.

About a minute with the previous release's virtualenv cached, 20-40 s more to build it
(printed, with the time of each phase)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable
from pathlib import Path

import asyncpg
import httpx2
import orjson
import pytest

from tenantry import __version__
from tenantry.db.fleet import read_fleet
from tenantry.db.release import Release
from tenantry.db.schema_files import contract_steps
from tenantry.ids import RunId
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.db import scratch_database
from tests.support.escapes import count_escapes
from tests.support.harness import WorkerFleet, WorkerProcess, verify
from tests.support.previous_release import BEFORE_ROUTINES, previous_release
from tests.support.release_venv import installed
from tests.support.rolling import (
    WITHIN,
    Backend,
    Cell,
    Command,
    GatedModelServer,
    Load,
    Service,
    Timings,
    json_lines,
    set_up_tenants,
    start_service,
    start_waiting_runs,
    two_effects,
)
from tests.support.sandbox import require
from tests.support.waiting import until

# A hang guard, not a measure: a cold build of the previous release's virtualenv included.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

NEW = __version__
#: Held in flight on the previous release's workers until they stop; held on this
#: release's worker when it is killed.
HANDED_BACK, ROLLBACK = 4, 3
#: What a worker or dispatcher of 0.1.0 logs when it cannot register (its runs/worker.py,
#: runs/liveness.py): a failed registration is waited out, as an outage would be.
NO_SESSION = ("no worker session connection, claiming nothing: ",
              "no session connection, claiming nothing: ")


async def test_a_rolling_upgrade_from_the_previous_release_under_load(
    admin_dsn: str, mcp: EffectsMcpServer, tmp_path: Path,
) -> None:
    require("bwrap")
    ref = previous_release()
    why = (f"the newest v* tag reachable from HEAD, {ref}" if ref != BEFORE_ROUTINES else
           "no v* tag yet: 75566d2, the commit before the routines refactor's first commit "
           "(475925f), as release 0.1.0 last ran")
    old = await asyncio.to_thread(installed, ref)
    built = (f"built in {old.built_seconds:.1f}s" if old.built_seconds is not None
             else "cached")
    print(f"\nprevious release {old.version} at {old.sha[:12]} ({why}); its virtualenv "
          f"{built}: {old.venv}")
    assert old.version != NEW, f"the previous release {ref} is this code's release {NEW}"
    timings = Timings()
    async with scratch_database(admin_dsn, "tenantry_rolling") as dsn, \
            GatedModelServer() as model, EffectsMcpServer() as side_mcp:
        conn = await asyncpg.connect(dsn)
        cell = Cell(dsn, conn, old, model, mcp, side_mcp, tmp_path)
        try:
            await _upgrade(cell, timings)
            await _check_everything(cell)
        finally:
            await conn.close()
    timings.mark("checked")
    print(f"rolling upgrade {old.version} -> {NEW}: {timings.describe()}\n"
          f"answers by phase, API and status:\n{cell.traffic.table()}")


async def _upgrade(cell: Cell, timings: Timings) -> None:
    old_release, traffic = cell.old.version, cell.traffic
    first = await asyncio.to_thread(cell.migrate, old=True)  # its own, on an empty database
    assert first.returncode == 0, str(first)
    # This code's contract steps the previous release did not have (it applied its own to
    # the new database): 0001 when that is 0.1.0, which had none.
    applied = set()
    if await cell.conn.fetchval("SELECT to_regclass('schema_contract_steps') IS NOT NULL"):
        applied = {r[0] for r in await cell.conn.fetch(
            "SELECT version FROM schema_contract_steps")}
    due = [step.label for step in contract_steps() if step.version not in applied]

    async with contextlib.AsyncExitStack() as stack:
        # -- the previous release, alone, under load ------------------------------------
        old_workers = await stack.enter_async_context(cell.fleet("old-workers", old=True))
        new_workers = await stack.enter_async_context(cell.fleet("new-workers", old=False))
        old_api_process = await stack.enter_async_context(cell.api("old-api", old=True))
        ow1, ow2 = await old_workers.spawn(), await old_workers.spawn()
        old_dispatcher = await _service(stack, cell.dispatcher("old-dispatcher", old=True))
        await asyncio.gather(old_workers.wait_ready(ow1), old_workers.wait_ready(ow2))
        old_api = Backend(f"{old_release} api", await stack.enter_async_context(
            httpx2.AsyncClient(base_url=old_api_process.base_url, timeout=30)))
        traffic.join(old_api)
        traffic.phase = f"{old_release} alone"
        await set_up_tenants(cell, old_api, old_api_process.operator)
        await start_waiting_runs(cell, old_api)
        load = Load(cell)
        stack.push_async_callback(load.stop)
        load.start()

        async def old_release_working() -> bool:
            """It does real work before anything changes: its workers finish keyed runs,
            its dispatcher an activity, and every approval is requested (the careful
            child's too)."""
            load.check()
            return (await cell.count("SELECT count(*) FROM approvals WHERE status = "
                                     "'pending'") == len(cell.side.approvals) + 1
                    and await cell.finished_keyed() >= 4
                    and await cell.count("SELECT count(*) FROM runs WHERE kind = 'activity' "
                                         "AND status = 'finished'") >= 1)

        await until(old_release_working, "the previous release's workers finish runs, its "
                    "dispatcher an activity, and the approvals are requested", WITHIN,
                    lambda: old_workers.tails() + load.describe())
        timings.mark("previous release up, under load")

        # -- expand: this code's migrate under it ---------------------------------------
        traffic.phase = f"{NEW} migrate under {old_release}"
        status = await asyncio.to_thread(cell.migrate, "--status")
        assert status.returncode == 0, str(status)
        print(f"before migrating, {NEW}'s tenantry migrate --status:\n{status.stdout}")
        assert _line(status, "connected: ").startswith(f"connected: {old_release} ("), status
        assert _line(status, "migrate: ").startswith((
            "migrate: safe with what is connected", "migrate: nothing to apply")), str(status)
        migrated = await asyncio.to_thread(cell.migrate)
        assert migrated.returncode == 0, str(migrated)
        assert migrated.lines()[-1].startswith(f"{len(due)} contract step(s) due") if due \
            else migrated.lines()[-1].endswith("schema is current"), str(migrated)
        timings.mark("migrated")
        done = await cell.finished_keyed()

        async def old_workers_go_on() -> bool:
            load.check()
            return await cell.finished_keyed() >= done + 3

        await until(old_workers_go_on, "the previous release's workers, alone, finish runs "
                    "on the new schema", WITHIN, old_workers.tails)
        # Runs they will hold when they are stopped: in flight, past their first step.
        handed_back = await cell.held_runs(
            [two_effects(500 + i) for i in range(HANDED_BACK)], old_api)

        async def old_workers_hold() -> bool:
            load.check()
            return await cell.holders(handed_back) is not None

        await until(old_workers_hold, "the previous release's workers hold the held runs",
                    WITHIN, old_workers.tails)

        # -- this release beside it -----------------------------------------------------
        new_api_process = await stack.enter_async_context(cell.api("new-api", old=False))
        nw1, nw2 = await new_workers.spawn(), await new_workers.spawn()
        await _service(stack, cell.dispatcher("new-dispatcher", old=False))
        await asyncio.gather(new_workers.wait_ready(nw1), new_workers.wait_ready(nw2))
        new_api = Backend(f"{NEW} api", await stack.enter_async_context(
            httpx2.AsyncClient(base_url=new_api_process.base_url, timeout=30)))
        traffic.phase = "both releases"
        traffic.join(new_api)
        new_ids = {nw1.worker_id(), nw2.worker_id()}

        async def both_serve() -> bool:
            """Each API accepts runs, and this release's workers hold some while the
            previous release's still hold theirs."""
            load.check()
            owners = {r["lease_owner"] for r in await cell.conn.fetch(
                "SELECT lease_owner FROM runs WHERE status = 'running'")}
            return (traffic.served(traffic.phase, old_api.name) >= 3
                    and traffic.served(traffic.phase, new_api.name) >= 3
                    and bool(owners & new_ids))

        await until(both_serve, "both APIs accept runs and both releases' workers run them",
                    WITHIN, load.describe)
        timings.mark("both releases up")

        # -- the previous release stopped, one process at a time ------------------------
        traffic.phase = f"stopping {old_release}"
        holders = await cell.holders(handed_back)
        assert holders is not None, "the held runs are no longer held"
        held_by = {w: list(holders.values()).count(w.worker_id()) for w in (ow1, ow2)}
        first_old, second_old = sorted((ow1, ow2), key=lambda w: -held_by[w])
        await traffic.leave(old_api)
        old_api_process.process.send_signal(signal.SIGTERM)
        assert await old_api_process.process.wait() == 0, old_api_process.tail()
        assert await old_workers.terminate(first_old) == 0, first_old.tail()
        assert await old_dispatcher.terminate() == 0, old_dispatcher.tail()
        await load.arrivals(2, "runs keep arriving with one old worker left")
        assert await old_workers.terminate(second_old) == 0, second_old.tail()
        traffic.phase = f"{NEW} alone"

        async def handed_over() -> bool:
            """Handed back by the stopped workers, and held by this release's now."""
            owners = await cell.holders(handed_back)
            return owners is not None and set(owners.values()) <= new_ids

        await until(handed_over, f"{NEW}'s workers take the runs the stopped workers handed "
                    "back", WITHIN, new_workers.tails)
        cell.model.release()
        await load.arrivals(2, "runs keep arriving after the switch")
        await load.stop()
        assert old_workers.unexpected_exits() == [], old_workers.tails()
        epochs = await cell.epochs(handed_back)
        print(f"stopped {old_release}'s workers holding {held_by[first_old]} and "
              f"{held_by[second_old]} runs in flight: handed back, taken at epochs "
              f"{sorted(epochs.values())}")
        timings.mark("previous release stopped")

        # -- after the switch: the approvals asked for under the previous release -------
        await until(cell.none_left, "every run not waiting for a person ends", WITHIN,
                    lambda: new_workers.tails() + load.describe())
        await _decide_approvals(cell, new_api)
        await until(lambda: cell.none_left(but_approvals=False),
                    "the approved and denied runs go on and finish", WITHIN, new_workers.tails)
        timings.mark("approvals decided, every run ended")

        # -- the rollback direction -----------------------------------------------------
        traffic.phase = "rollback"
        assert await new_workers.terminate(nw2) == 0, nw2.tail()
        old_worker = await _rollback(cell, new_api, new_workers, nw1, old_workers)
        timings.mark("rollback: a killed new worker's runs continued")

        # -- contract -------------------------------------------------------------------
        traffic.phase = "contract"
        if due:
            refused = await asyncio.to_thread(cell.migrate, "--contract")
            assert refused.returncode == 2, str(refused)
            assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]
            assert refused.stderr.startswith(
                f"error: contract step(s) {', '.join(due)} not applied: {old_release} ("), \
                str(refused)
            print(f"--contract with a worker of {old_release} up: {refused.stderr.strip()}")
        nw3, nw4 = await new_workers.spawn(), await new_workers.spawn()
        await asyncio.gather(new_workers.wait_ready(nw3), new_workers.wait_ready(nw4))
        assert await old_workers.terminate(old_worker) == 0, old_worker.tail()

        async def none_of_it_connected() -> bool:  # its sessions end just after it does
            return not (await read_fleet(cell.conn)).older_than(Release.parse(NEW).line)

        await until(none_of_it_connected, f"no process of {old_release} is connected", WITHIN)
        status = await asyncio.to_thread(cell.migrate, "--status")
        assert _line(status, "contract: ") == (
            f"contract: {len(due)} step(s) due ({', '.join(due)}); safe now: run 'tenantry "
            "migrate --contract'" if due else "contract: no step due"), str(status)
        contracted = await asyncio.to_thread(cell.migrate, "--contract")
        assert contracted.returncode == 0, str(contracted)
        assert contracted.lines() == [f"applied {len(due)} contract step(s)" if due
                                      else "no contract step due"], str(contracted)
        await _previous_release_refused(cell, stack, contracted=bool(due))
        await until(lambda: cell.none_left(but_approvals=False), "every run ends", WITHIN,
                    new_workers.tails)
        timings.mark("contracted, the previous release refused")
        assert new_workers.unexpected_exits() == [], new_workers.tails()
        assert old_workers.unexpected_exits() == [], old_workers.tails()


async def _decide_approvals(cell: Cell, api: Backend) -> None:
    """Through this release's API, every approval the previous release's workers asked
    for: approved, but one denied."""
    side = cell.side
    r = await cell.traffic.send("GET", "/v1/approvals", to=api, headers=side.headers,
                                params={"status": "pending"})
    assert r.status_code == 200, r.text
    pending = r.json()["data"]
    assert len(pending) == len(side.approvals) + 1, pending
    for approval in pending:
        decision = "deny" if approval["run_id"] == side.denied else "approve"
        r = await cell.traffic.send("POST", f"/v1/approvals/{approval['approval_id']}",
                                    to=api, headers=side.headers,
                                    json={"decision": decision, "comment": "not this one"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == {"approve": "approved", "deny": "denied"}[decision]


async def _rollback(cell: Cell, api: Backend, new_workers: WorkerFleet, nw1: WorkerProcess,
                    old_workers: WorkerFleet) -> WorkerProcess:
    """This release's worker nw1, the only worker, holds runs past their first step (the
    second waits at the model); a worker of the previous release starts; nw1 is SIGKILLed.
    The old worker takes the runs over at once (nw1's session lock went with it) and
    finishes them from what nw1 wrote — or, where nw1 wrote an event format it does not
    know, leaves them for a newer worker, as ADR 0010 says. Returns the old worker, up."""
    old_formats = orjson.loads(await asyncio.to_thread(cell.old.run_python, (
        "import json; from tenantry.runs.events import PAYLOADS; "
        "print(json.dumps({t: p.FORMAT for t, p in PAYLOADS.items()}))")))
    ids = await cell.held_runs([two_effects(1000 + i) for i in range(ROLLBACK)], api)

    async def held_by_nw1() -> bool:
        holders = await cell.holders(ids)
        return holders is not None and set(holders.values()) == {nw1.worker_id()}

    await until(held_by_nw1, f"{NEW}'s worker holds the runs, each past its first step",
                WITHIN, nw1.tail)
    written = await cell.conn.fetch("SELECT run_id, type, format FROM run_events "
                                    "WHERE run_id = ANY($1)", [RunId.parse(i).uuid for i in ids])
    assert {e["type"] for e in written} == {"RunCreated", "ModelReplied", "ToolCompleted"}
    newer = {(e["type"], e["format"]) for e in written
             if e["format"] > old_formats.get(e["type"], 0)}
    left_for_newer = {str(RunId(e["run_id"])) for e in written
                      if (e["type"], e["format"]) in newer}
    old = await old_workers.spawn()
    await old_workers.wait_ready(old)
    await new_workers.kill(nw1)

    async def taken_over() -> bool:
        return {t["run_id"] for t in old.takeovers()} >= set(ids)

    await until(taken_over, f"the {cell.old.version} worker takes the killed worker's runs",
                WITHIN, old.tail)
    for took in old.takeovers():
        assert (took["taken_from"], took["owner_gone"]) == (nw1.worker_id(), True), took
    cell.model.release()

    async def continued() -> bool:
        # No worker of this release is up: what finishes them is the previous release's.
        statuses = {str(RunId(r["run_id"])): r["status"] for r in await cell.conn.fetch(
            "SELECT run_id, status FROM runs WHERE run_id = ANY($1)",
            [RunId.parse(i).uuid for i in ids])}
        left = {line.get("run_id") for line in json_lines(old.log())
                if "leaving it to a newer worker" in str(line.get("msg"))}
        return left >= left_for_newer and all(
            statuses[i] == "finished" for i in ids if i not in left_for_newer)

    await until(continued, f"the {cell.old.version} worker finishes them, or leaves those "
                "holding a format newer than it knows", WITHIN, old.tail)
    print(f"rollback: {cell.old.version}'s worker took over {len(ids)} runs from {NEW}'s "
          f"killed worker; event formats {NEW} wrote that {cell.old.version} does not know: "
          f"{sorted(newer) or 'none'}, so it "
          + (f"left {len(left_for_newer)} run(s) for a newer worker and finished the rest"
             if left_for_newer else "finished them all"))
    return old


async def _previous_release_refused(cell: Cell, stack: contextlib.AsyncExitStack, *,
                                    contracted: bool) -> None:
    """After the contract step the previous release's worker is refused. A release of
    0.2.0 or later checks the schema's release at start: it exits, saying why in one line
    (unless this release had no contract step to apply: then nothing it uses is gone, and
    it starts). 0.1.0 checks nothing at start: contract step 0001 answers its registration
    with the line, which it logs (and again at each try); it claims nothing. Its
    dispatcher, the same. 0.1.0's API is not refused: step 0001 removed nothing it uses,
    and a run it accepts is run by this release's workers."""
    old = cell.old
    worker = await _service(stack, start_service(
        "refused-worker", cell.worker_argv(old=True), cell.env("refused-worker", old=True),
        cell.logs / "refused-worker.log"))
    if not contracted:
        assert old.version != "0.1.0", "0.1.0 is contracted by step 0001"
        await worker.wait_for("worker started", WITHIN)
        assert await worker.terminate() == 0, worker.tail()
        print(f"{NEW} has no contract step {old.version} lacks: {old.version}'s worker "
              "still starts after --contract, as nothing it uses is gone")
        return
    if old.version != "0.1.0":
        status = await asyncio.wait_for(worker.process.wait(), WITHIN)
        worker.exit_expected = True
        lines = worker.log().strip().splitlines()
        assert status != 0 and len(lines) == 1 and lines[0].startswith("error: "), \
            worker.tail()
        assert f"contracted by {NEW}" in lines[0], worker.tail()
        print(f"after the contract step, {old.version}'s worker is refused: {lines[0]}")
        return
    dispatcher = await _service(stack, cell.dispatcher("refused-dispatcher", old=True,
                                                       ready=False))
    says = (f"this database was contracted by release {NEW} (tenantry migrate --contract), "
            f"which removed what releases before {Release.parse(NEW).major}."
            f"{Release.parse(NEW).minor} use: this is release 0.1.0; run a release the "
            "database serves ('tenantry migrate --status' says which)")
    # Twice: it tried again, and was answered again.
    await worker.wait_for(NO_SESSION[0], WITHIN, count=2)
    await dispatcher.wait_for(NO_SESSION[1], WITHIN)
    assert {line["msg"] for line in worker.lines(NO_SESSION[0])} == {NO_SESSION[0] + says}
    assert {line["msg"] for line in dispatcher.lines(NO_SESSION[1])} == {NO_SESSION[1] + says}
    for service in (worker, dispatcher):
        assert "Traceback" not in service.log(), service.tail()
    assert worker.lines("first claim") == [], worker.tail()
    assert await cell.count("SELECT count(*) FROM worker_sessions WHERE release = '0.1.0'") == 0
    assert await worker.terminate() == 0, worker.tail()
    assert await dispatcher.terminate() == 0, dispatcher.tail()
    async with cell.api("old-api-after-contract", old=True) as old_api_process, \
            httpx2.AsyncClient(base_url=old_api_process.base_url, timeout=30) as client:
        old_api = Backend("0.1.0 api after the contract step", client)
        await cell.keyed_run(two_effects(2000), cell.tenants[1], old_api)
    print("after the contract step, 0.1.0's worker and dispatcher start, log "
          f"{NO_SESSION[0] + says!r} and claim nothing; 0.1.0's API starts and serves")


async def _check_everything(cell: Cell) -> None:
    conn, side = cell.conn, cell.side
    # Keyed runs: each once, exactly as planned; each effect exactly once at the server.
    verdict = await verify(conn, cell.runs, cell.mcp,
                           tenants=[t.tenant_id for t in cell.tenants])
    assert verdict.ok, verdict.describe()
    assert verdict.finished == len(cell.runs), verdict.describe()
    assert verdict.resumed_runs >= HANDED_BACK + ROLLBACK, verdict.describe()
    # Every run of the cell finished, children and activity tasks too: none failed by us.
    statuses = {r["status"]: r["n"] for r in await conn.fetch(
        "SELECT status, count(*) AS n FROM runs GROUP BY status")}
    assert set(statuses) == {"finished"}, statuses
    assert await cell.count("SELECT count(*) FROM run_events WHERE type = 'RunFailed'") == 0
    # The approvals decided after the switch applied: the approved calls happened once,
    # the denied one never; no call reached the server that its run's rules forbade.
    applied = {c.arguments["note"] for c in cell.side_mcp.calls
               if c.tool == "effect" and c.applied}
    for run_id, note in side.approvals.items():
        assert (note in applied) == (run_id != side.denied), (run_id, note, sorted(applied))
    assert "careful-0" in applied
    escapes = await count_escapes(conn, cell.side_mcp.calls)
    assert escapes.count == 0, escapes.examples
    counts = cell.side_mcp.key_counts()
    assert [k for k, c in counts.items() if c.effects != 1] == [], counts
    # Parents got their children's answers; every child finished.
    for parent, answers in side.parents.items():
        row = await conn.fetchrow("SELECT status, answer #>> '{}' AS answer FROM runs "
                                  "WHERE run_id = $1", RunId.parse(parent).uuid)
        assert row is not None and row["status"] == "finished", (parent, row)
        assert all(text in row["answer"] for text in answers), (parent, row["answer"])
        children = await conn.fetch("SELECT status FROM runs WHERE parent_run_id = $1",
                                    RunId.parse(parent).uuid)
        assert [c["status"] for c in children] == ["finished"] * len(answers), parent
    # Activities: each run got its square, each task its result.
    for run_id, n in side.calc.items():
        found = await conn.fetchval("SELECT answer #>> '{}' FROM runs WHERE run_id = $1",
                                    RunId.parse(run_id).uuid)
        assert f'"square":{n * n}' in found.replace(" ", ""), (run_id, found)
    for task_id, n in side.tasks.items():
        result = await conn.fetchval("SELECT answer::text FROM runs WHERE run_id = $1",
                                     RunId.parse(task_id).uuid)
        assert orjson.loads(result)["square"] == n * n, (task_id, result)
    # No 5xx at any moment, and every request answered.
    assert cell.traffic.failures() == [], cell.traffic.failures()[:20]
    print(f"checked: {verdict.counts()}; {len(side.parents)} parents, {len(side.calc)} "
          f"activity runs, {len(side.tasks)} activity tasks, {len(side.approvals) + 1} "
          f"approvals decided after the switch; {len(cell.traffic.answers)} API answers, "
          "none a 5xx")


async def _service(stack: contextlib.AsyncExitStack, starting: Awaitable[Service]) -> Service:
    """A started :class:`Service`, stopped when ``stack`` closes if it is still up."""
    service = await starting

    async def stop() -> None:
        if service.process.returncode is None:
            with contextlib.suppress(Exception):
                await service.terminate()

    stack.push_async_callback(stop)
    return service


def _line(command: Command, prefix: str) -> str:
    found = [line for line in command.lines() if line.startswith(prefix)]
    assert len(found) == 1, f"no {prefix!r} line:\n{command}"
    return found[0]
