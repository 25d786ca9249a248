"""Batching and warm state on real sandboxes (every backend) and a real Postgres (ADR 0014):
a batch of tasks is served by one sandbox, each task with its own result, key and attempt
record, and the next task finds nothing of the one before (files, processes, secrets); a
task that kills the sandbox ends the batch and the rest are served, uncounted, by a fresh
one; a warm sandbox is woken for the same tenant and version and never for another
tenant; idle expiry and a stop destroy it (its process is gone)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.activities.code.versions import BatchSettings, WarmSettings
from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import RunStatus
from tests.support.activity_rig import (
    WITHIN,
    ActivityRig,
    activity_rig,
    heartbeat_renews,
    steal_lease,
)
from tests.support.sandbox import secret_token, token_sha
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(900)

ACME = TenantId.parse("tenant-acme")
GLOBEX = TenantId.parse("tenant-globex")
LONG_IDLE = WarmSettings(idle_seconds=600.0)


@pytest.fixture
async def setup(db: Database, driver: PooledDriver) -> AsyncIterator[ActivityRig]:
    """Every sandbox the dispatchers are handed is recorded, to look at after."""
    async with activity_rig(db, driver, tenants=(ACME, GLOBEX), record=True) as rig:
        yield rig


def _gone(pid: int | None) -> bool:
    return pid is None or not os.path.exists(f"/proc/{pid}")


ECHO = """
    def handle(value, context):
        return {"input": value, "key": context.idempotency_key, "task": context.task_id}
"""

#: "leave": plant the secret and the input's marker everywhere a later task could look
#: (the work folder, /tmp, /dev/shm, a daemon in a session of its own holding the secret
#: in its environment). "look": report where any token or marker shows up, except in this
#: execution's own environment, and what the work folder and /tmp hold.
LEAVE_AND_LOOK = r'''
import os, re, subprocess, sys

TOKEN = re.compile(rb"(tnt[0-9a-f]{32}|marker-[0-9a-f]{8})")

def handle(value, context):
    if value["role"] == "leave":
        planted = (os.environ["API_KEY"] + " " + value["marker"]).encode()
        for path in ("leak.txt", "/tmp/leak.txt", "/dev/shm/leak.txt"):
            try:
                with open(path, "wb") as f:
                    f.write(planted)
            except OSError:
                pass
        os.makedirs("deep/er", exist_ok=True)
        with open("deep/er/leak.txt", "wb") as f:
            f.write(planted)
        os.chmod("deep/er", 0o500)  # a read-only folder: the scrub must still empty it
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {"left": value["marker"]}
    found = []
    def note(data, where):
        for token in set(TOKEN.findall(data)):
            found.append([token.decode(), where])
    for top in (".", "/tmp", "/var/tmp", "/dev/shm"):
        for root, dirs, names in os.walk(top):
            for name in names:
                path = os.path.join(root, name)
                if path in ("./input.json",):
                    continue  # its own input, which names its own marker
                try:
                    with open(path, "rb") as f:
                        note(f.read(1 << 16), path)
                except OSError:
                    pass
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != me:
            for part in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as f:
                        note(f.read(1 << 16), f"/proc/{pid}/{part}")
                except OSError:
                    pass
    return {"found": found, "own_secret": os.environ.get("API_KEY"),
            "work": sorted(os.listdir(".")), "tmp": sorted(os.listdir("/tmp")),
            "key": context.idempotency_key}
'''


async def test_a_batch_is_served_by_one_sandbox_each_task_with_its_own_result_and_key(
    setup: ActivityRig,
) -> None:
    await setup.publish(ACME, "short", ECHO, batch=BatchSettings(max_tasks=3,
                                                                 max_seconds=600.0))
    tasks = [await setup.enqueue(ACME, "short", {"n": n}) for n in range(4)]
    setup.dispatcher()

    done = [await setup.settled(ACME, t) for t in tasks]
    assert [d.status for d in done] == [RunStatus.FINISHED] * 4, done
    for n, (task, d) in enumerate(zip(tasks, done, strict=True)):
        assert d.result == {"input": {"n": n}, "key": f"{task}:short", "task": str(task)}
        assert d.attempts == 1
    sandbox_ids = []
    for task in tasks:
        [attempt] = await setup.attempts(ACME, task)
        assert attempt["status"] == "completed" and attempt["attempt"] == 1
        sandbox_ids.append(attempt["sandbox_id"])
    # max_tasks 3: the first three in one sandbox, the fourth in the next one.
    assert sandbox_ids[0] == sandbox_ids[1] == sandbox_ids[2] != sandbox_ids[3]
    assert [s.id for s in setup.sandboxes] == [sandbox_ids[0], sandbox_ids[3]]
    # Not warm: each batch's sandbox is destroyed after its last task.
    await until(lambda: _all_gone(setup), "the batches' sandboxes are destroyed", WITHIN)


async def test_a_batch_ends_when_its_seconds_are_spent(setup: ActivityRig) -> None:
    # A millisecond is spent by any task: each batch serves one task, then its sandbox goes.
    await setup.publish(ACME, "slow", ECHO, batch=BatchSettings(max_tasks=10,
                                                                max_seconds=0.001))
    tasks = [await setup.enqueue(ACME, "slow", {"n": n}) for n in range(2)]
    setup.dispatcher()
    for task in tasks:
        assert (await setup.settled(ACME, task)).status is RunStatus.FINISHED
    ids = [(await setup.attempts(ACME, t))[0]["sandbox_id"] for t in tasks]
    assert ids[0] != ids[1] and len(setup.sandboxes) == 2


async def _all_gone(setup: ActivityRig) -> bool:
    return all(s.destroyed and _gone(s.instance.pid) for s in setup.sandboxes)


async def test_the_next_task_in_a_batch_finds_nothing_of_the_one_before(setup: ActivityRig) -> None:
    secret = secret_token()
    await setup.vault.put(ACME, "API_KEY", secret)
    await setup.publish(ACME, "careful", LEAVE_AND_LOOK, secrets=("API_KEY",),
                        batch=BatchSettings(max_tasks=2, max_seconds=600.0))
    first = await setup.enqueue(ACME, "careful", {"role": "leave", "marker": "marker-0000aaaa"})
    second = await setup.enqueue(ACME, "careful", {"role": "look", "marker": "marker-0000bbbb"})
    setup.dispatcher()

    left, looked = await setup.settled(ACME, first), await setup.settled(ACME, second)
    assert left.status is looked.status is RunStatus.FINISHED, (left, looked)
    [a1], [a2] = await setup.attempts(ACME, first), await setup.attempts(ACME, second)
    assert a1["sandbox_id"] == a2["sandbox_id"]  # the same sandbox, so the check means it
    result = looked.result
    assert result["own_secret"] == secret  # its own secrets, on its own stdin
    assert result["found"] == [], result["found"]
    assert result["work"] == ["bundle", "input.json"] and result["tmp"] == []
    assert result["key"] == f"{second}:careful"


async def test_a_task_that_kills_the_sandbox_ends_the_batch_and_the_rest_go_on_uncounted(
    setup: ActivityRig,
) -> None:
    code = """
        import ctypes
        def handle(value, context):
            if value.get("crash"):
                ctypes.string_at(0)
            return {"n": value["n"]}
    """
    await setup.publish(ACME, "mixed", code, max_attempts=1,
                        batch=BatchSettings(max_tasks=10, max_seconds=600.0))
    tasks = [await setup.enqueue(ACME, "mixed", {"n": n, "crash": n == 1}) for n in range(4)]
    setup.dispatcher()

    done = [await setup.settled(ACME, t) for t in tasks]
    assert [d.status for d in done] == [RunStatus.FINISHED, RunStatus.FAILED,
                                        RunStatus.FINISHED, RunStatus.FINISHED], done
    attempts = [await setup.attempts(ACME, t) for t in tasks]
    assert [len(a) for a in attempts] == [1, 1, 1, 1]  # the rest were never counted
    ids = [a[0]["sandbox_id"] for a in attempts]
    assert attempts[1][0]["killed_sandbox"]
    assert ids[0] == ids[1] != ids[2] == ids[3]


async def test_a_warm_sandbox_is_woken_for_the_next_task_and_holds_nothing_of_the_last(
    setup: ActivityRig,
) -> None:
    old, new = secret_token(), secret_token()
    await setup.vault.put(ACME, "API_KEY", old)
    await setup.publish(ACME, "warm", LEAVE_AND_LOOK, secrets=("API_KEY",), warm=LONG_IDLE)
    d = setup.dispatcher()
    first = await setup.enqueue(ACME, "warm", {"role": "leave", "marker": "marker-0000aaaa"})
    assert (await setup.settled(ACME, first)).status is RunStatus.FINISHED
    await until(lambda: _kept(d, 1), "the sandbox is kept", WITHIN)
    await setup.vault.put(ACME, "API_KEY", new)  # rotated: task 2 must get only the new one

    second = await setup.enqueue(ACME, "warm", {"role": "look", "marker": "marker-0000bbbb"})
    looked = await setup.settled(ACME, second)
    assert looked.status is RunStatus.FINISHED, looked
    [a1], [a2] = await setup.attempts(ACME, first), await setup.attempts(ACME, second)
    assert a1["sandbox_id"] == a2["sandbox_id"]
    assert d.warm.counts.get("woken") == 1 and len(setup.sandboxes) == 1
    result = looked.result
    assert result["own_secret"] == new
    assert result["found"] == [], [(token_sha(t) if t.startswith("tnt") else t, where)
                                   for t, where in result["found"]]
    assert result["work"] == ["bundle", "input.json"] and result["tmp"] == []

    # Kept again after the second task; a stop destroys it (its process is gone).
    await until(lambda: _kept(d, 1), "the sandbox is kept again", WITHIN)
    pid = setup.sandboxes[0].instance.pid
    assert pid is not None and not _gone(pid)
    await d.stop()
    assert d.warm.kept() == [] and setup.sandboxes[0].destroyed
    await until(lambda: _async(_gone(pid)), "the stopped dispatcher's VM is gone", WITHIN)


async def _kept(d: Dispatcher, n: int) -> bool:
    return len(d.warm.kept()) == n


async def _async(value: bool) -> bool:
    return value


async def test_a_warm_sandbox_of_one_tenant_is_never_used_for_another(setup: ActivityRig) -> None:
    for tenant in (ACME, GLOBEX):
        await setup.publish(tenant, "same_name", ECHO, warm=LONG_IDLE)
    d = setup.dispatcher()
    a1 = await setup.enqueue(ACME, "same_name", {"who": "acme"})
    await setup.settled(ACME, a1)
    await until(lambda: _kept(d, 1), "acme's sandbox is kept", WITHIN)
    b1 = await setup.enqueue(GLOBEX, "same_name", {"who": "globex"})
    assert (await setup.settled(GLOBEX, b1)).result["input"] == {"who": "globex"}
    await until(lambda: _kept(d, 2), "both sandboxes are kept", WITHIN)
    a2 = await setup.enqueue(ACME, "same_name", {"who": "acme again"})
    assert (await setup.settled(ACME, a2)).result["key"] == f"{a2}:same_name"

    [sa1], [sb1], [sa2] = [await setup.attempts(t, r)
                           for t, r in ((ACME, a1), (GLOBEX, b1), (ACME, a2))]
    assert sa1["sandbox_id"] != sb1["sandbox_id"]  # globex got a fresh one
    assert sa1["sandbox_id"] == sa2["sandbox_id"]  # acme's own was woken
    by_id = {s.id: s for s in setup.sandboxes}
    assert by_id[sa1["sandbox_id"]].binding.tenant == ACME
    assert by_id[sb1["sandbox_id"]].binding.tenant == GLOBEX
    await until(lambda: _kept(d, 2), "acme's is kept again", WITHIN)
    assert sorted(lived.key[0] for lived in d.warm.kept()) == [ACME.value, GLOBEX.value]
    assert all(lived.sandbox.binding.tenant.value == lived.key[0] for lived in d.warm.kept())


async def test_idle_expiry_destroys_the_warm_sandbox_and_the_next_task_gets_a_fresh_one(
    setup: ActivityRig,
) -> None:
    await setup.publish(ACME, "brief", ECHO, warm=WarmSettings(idle_seconds=0.5))
    d = setup.dispatcher()
    first = await setup.enqueue(ACME, "brief", {"n": 1})
    assert (await setup.settled(ACME, first)).status is RunStatus.FINISHED
    await until(lambda: _async(d.warm.counts.get("expired") == 1), "the idle time passes",
                WITHIN)
    [sandbox] = setup.sandboxes
    await until(lambda: _async(sandbox.destroyed and _gone(sandbox.instance.pid)),
                "the expired sandbox's process is gone", WITHIN)
    assert d.warm.kept() == []

    second = await setup.enqueue(ACME, "brief", {"n": 2})
    assert (await setup.settled(ACME, second)).status is RunStatus.FINISHED
    [a1], [a2] = await setup.attempts(ACME, first), await setup.attempts(ACME, second)
    assert a1["sandbox_id"] != a2["sandbox_id"]
    assert d.warm.counts.get("woken") is None


async def test_a_tenant_keeps_no_more_warm_sandboxes_than_its_activity_slots(
    setup: ActivityRig,
) -> None:
    await setup.store.set_activity_slots(ACME, 1)
    for name in ("one", "two"):
        await setup.publish(ACME, name, ECHO, warm=LONG_IDLE)
    d = setup.dispatcher()
    for made, name in enumerate(("one", "two"), start=1):
        task = await setup.enqueue(ACME, name, {"n": name})
        assert (await setup.settled(ACME, task)).status is RunStatus.FINISHED
        await until(lambda made=made: _async(len(d.warm.kept(ACME)) == 1 and len(
            setup.sandboxes) == made), "one kept", WITHIN)
    # The oldest (activity "one") went over the cap of 1: destroyed; "two"'s is kept.
    first = setup.sandboxes[0]
    await until(lambda: _async(first.destroyed and _gone(first.instance.pid)),
                "the capped sandbox is gone", WITHIN)
    assert d.warm.counts.get("capped") == 1
    assert [lived.sandbox.id for lived in d.warm.kept()] == [setup.sandboxes[1].id]


async def test_a_lost_lease_destroys_a_warm_versions_sandbox_and_keeps_nothing(
    setup: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    code = """
        import time
        def handle(value, context):
            while True:  # only the host ends this attempt
                time.sleep(1)
    """
    await setup.publish(ACME, "stuck", code, timeout_s=3600.0, warm=LONG_IDLE,
                        batch=BatchSettings(max_tasks=5, max_seconds=600.0))
    task = await setup.enqueue(ACME, "stuck")
    d = setup.dispatcher()
    await heartbeat_renews(admin_conn, task)
    await steal_lease(admin_conn, task)
    await until(lambda: _async(d.outcomes["lease_lost"] == 1), "the lease is found gone",
                WITHIN)
    [sandbox] = setup.sandboxes
    await until(lambda: _async(sandbox.destroyed and _gone(sandbox.instance.pid)),
                "the sandbox is destroyed, not kept", WITHIN)
    assert d.warm.kept() == []
    assert await setup.attempts(ACME, task) == []
