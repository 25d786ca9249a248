"""The activity dispatcher on real sandboxes (every backend) and a real Postgres (ADR 0013):
a task completes with its result and the key ``"{task}:{activity}"``, and the guest sees only the
secrets its version is scoped to; a segfaulting payload is retried on a
fresh sandbox, dead-lettered after its sandbox deaths, never dispatched again, and
requeued; a tenant's poison storm does not keep another tenant's tasks from completing; a
raising entrypoint fails without retry; a lost lease ends the attempt and writes nothing; a
secret gone between enqueue and dispatch fails the attempt as retryable until it is back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import RunStatus
from tests.support.activity_rig import (
    WITHIN,
    ActivityRig,
    RecordingDriver,
    activity_rig,
    heartbeat_renews,
    settled_now,
    steal_lease,
)
from tests.support.sandbox import secret_token, token_sha
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(900)

ACME = TenantId.parse("tenant-acme")
GLOBEX = TenantId.parse("tenant-globex")


@pytest.fixture
async def setup(db: Database, driver: PooledDriver) -> AsyncIterator[ActivityRig]:
    async with activity_rig(db, driver, tenants=(ACME, GLOBEX), slots=3) as rig:
        yield rig


#: Reports the hash of every token shaped like the test's values (``tnt`` + 32 hex) in the
#: environment and the files the step can reach where secrets would be left (its work
#: folder, /tmp, /run, its own /proc entries): it is never told a value it should not see.
PROBE = r'''
import hashlib, os, re

TOKEN = re.compile(rb"tnt[0-9a-f]{32}")

def handle(value, context):
    found = {}
    def note(data, where):
        for token in set(TOKEN.findall(data)):
            found.setdefault(hashlib.sha256(token).hexdigest(), where)
    note("\n".join(f"{k}={v}" for k, v in os.environ.items()).encode(), "os.environ")
    for top in (".", "/tmp", "/run", "/proc/self", "/proc/1"):
        for root, dirs, names in os.walk(top):
            dirs[:] = [] if root.startswith("/proc") else dirs
            for name in names:
                try:
                    with open(os.path.join(root, name), "rb") as f:
                        note(f.read(1 << 16), os.path.join(root, name))
                except OSError:
                    pass
    return {"found": found, "key": context.idempotency_key, "input": value,
            "env_key": os.environ["ACTIVITY_IDEMPOTENCY_KEY"]}
'''


async def test_a_task_completes_with_its_result_and_key_and_sees_only_its_scoped_secret(
    setup: ActivityRig,
) -> None:
    scoped, unscoped, globex_same_name = secret_token(), secret_token(), secret_token()
    await setup.vault.put(ACME, "API_KEY", scoped)
    await setup.vault.put(ACME, "OTHER_KEY", unscoped)  # the tenant's, not the activity's
    await setup.vault.put(GLOBEX, "API_KEY", globex_same_name)
    await setup.publish(ACME, "send_invoice", PROBE, secrets=("API_KEY",))
    task = await setup.enqueue(ACME, "send_invoice", {"order": 7})
    setup.dispatcher()

    done = await setup.settled(ACME, task)
    assert done.status is RunStatus.FINISHED, done
    result = done.result
    assert result["key"] == result["env_key"] == f"{task}:send_invoice"
    assert result["input"] == {"order": 7}
    found: dict[str, str] = result["found"]
    assert found.pop(token_sha(scoped)) == "os.environ"  # the positive control
    names = {token_sha(unscoped): "the unscoped secret",
             token_sha(globex_same_name): "globex's secret"}
    assert found == {}, [names.get(h, "an unknown token") + " at " + w
                         for h, w in found.items()]
    [attempt] = await setup.attempts(ACME, task)
    assert attempt["attempt"] == 1 and attempt["status"] == "completed"
    assert done.attempts == 1 and not done.dead_lettered


SEGFAULT = """
    import ctypes
    def handle(value, context):
        ctypes.string_at(0)
"""
GOOD = """
    def handle(value, context):
        return {"ok": value}
"""


async def test_a_segfault_is_retried_on_fresh_sandboxes_dead_lettered_and_requeued(
    setup: ActivityRig,
) -> None:
    await setup.publish(ACME, "poison", SEGFAULT, max_attempts=10, max_sandbox_deaths=2)
    await setup.publish(ACME, "fine", GOOD)
    poison = await setup.enqueue(ACME, "poison")
    setup.dispatcher()

    dead = await setup.settled(ACME, poison)
    assert dead.dead_lettered and dead.status is RunStatus.WAITING, dead
    assert dead.error["dead_lettered"] is True and dead.error["sandbox_deaths"] == 2
    first = await setup.attempts(ACME, poison)
    assert [a["attempt"] for a in first] == [1, 2]
    assert all(a["killed_sandbox"] and a["error"].startswith("crashed: SIGSEGV")
               for a in first)
    assert len({a["sandbox_id"] for a in first}) == 2  # a fresh sandbox each time

    # Never dispatched again: a task queued after it is served, the dead letter is not.
    later = await setup.enqueue(ACME, "fine", 1)
    assert (await setup.settled(ACME, later)).status is RunStatus.FINISHED
    assert len(await setup.attempts(ACME, poison)) == 2
    assert (await setup.store.get(ACME, poison)).dead_lettered

    await setup.store.requeue(ACME, poison)
    again = await setup.store.get(ACME, poison)
    assert not again.dead_lettered and again.status in (RunStatus.QUEUED, RunStatus.RUNNING)
    dead_again = await setup.settled(ACME, poison)
    assert dead_again.dead_lettered  # two more deaths, counted afresh after the requeue
    assert [a["attempt"] for a in await setup.attempts(ACME, poison)] == [1, 2, 3, 4]


async def test_a_tenants_poison_storm_does_not_stop_another_tenants_tasks(
    setup: ActivityRig,
) -> None:
    await setup.store.set_activity_slots(ACME, 1)
    await setup.publish(ACME, "poison", SEGFAULT, max_attempts=10, max_sandbox_deaths=3)
    await setup.publish(GLOBEX, "steady", GOOD)
    storm = [await setup.enqueue(ACME, "poison", i) for i in range(4)]
    steady = [await setup.enqueue(GLOBEX, "steady", i) for i in range(4)]
    dispatcher = setup.dispatcher(slots=3)

    for i, task in enumerate(steady):
        done = await setup.settled(GLOBEX, task)
        assert done.status is RunStatus.FINISHED and done.result == {"ok": i}
    # The storm was still going when the neighbour's work was all done: it ran beside it.
    still_poisoned = [t for t in storm if not (await setup.store.get(ACME, t)).dead_lettered]
    assert still_poisoned, "the storm ended before the neighbour's tasks: nothing was shown"
    for task in storm:
        assert (await setup.settled(ACME, task)).dead_lettered
    # The dispatcher kept going through every death (none was an error of ours).
    assert dispatcher.outcomes["dead_lettered"] == 4 and dispatcher.outcomes["error"] == 0


async def test_a_raising_entrypoint_fails_without_a_retry(setup: ActivityRig) -> None:
    code = """
        def handle(value, context):
            raise RuntimeError("the tenant's own bug")
    """
    await setup.publish(ACME, "buggy", code, max_attempts=5)
    task = await setup.enqueue(ACME, "buggy")
    setup.dispatcher()

    done = await setup.settled(ACME, task)
    assert done.status is RunStatus.FAILED, done
    assert done.error["ours"] is False and done.attempts == 1
    [attempt] = await setup.attempts(ACME, task)
    assert attempt["status"] == "failed" and not attempt["killed_sandbox"]
    assert "the tenant's own bug" in attempt["stderr"]


async def test_a_lost_lease_ends_the_attempt_and_writes_nothing(
    setup: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    code = """
        import time
        def handle(value, context):
            while True:  # only the host ends this attempt
                time.sleep(1)
    """
    await setup.publish(ACME, "slow", code, timeout_s=3600.0)
    task = await setup.enqueue(ACME, "slow")
    recording = RecordingDriver(setup.driver)
    first = setup.dispatcher(driver=recording)
    # A renewal is the attempt's heartbeat: the guest is running its code.
    await heartbeat_renews(admin_conn, task)
    # Another dispatcher takes the task (its lease expired, a claim bumped the epoch).
    await steal_lease(admin_conn, task)

    async def lost() -> bool:
        return first.outcomes["lease_lost"] == 1
    # A hang guard, not a measure: heartbeats go every 0.2 s; without the fence the
    # attempt would run for its whole hour.
    await until(lost, "the first dispatcher's heartbeat finds the lease gone", 120.0)
    [sandbox] = recording.sandboxes
    assert not sandbox.alive  # the attempt ended and its sandbox was destroyed
    row = await admin_conn.fetchrow(
        "SELECT status, lease_owner, answer, error FROM runs WHERE run_id = $1", task.uuid)
    assert dict(row) == {"status": "running", "lease_owner": "thief", "answer": None,
                         "error": None}
    assert await setup.attempts(ACME, task) == []  # nothing written by the old holder
    assert first.outcomes["completed"] == first.outcomes["failed"] == 0


#: Reports which value of its secret it was given (by hash: a result is kept in the log).
SECRET_SEEN = """
    import hashlib, os
    def handle(value, context):
        return {"secret_sha": hashlib.sha256(os.environ["API_KEY"].encode()).hexdigest()}
"""


# The dispatcher's decision, not the backend's: bubblewrap, the quickest, is enough.
@pytest.mark.parametrize("driver", ["bwrap"], indirect=True)
async def test_a_secret_gone_before_dispatch_fails_the_attempt_as_retryable_until_back(
    setup: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    await setup.vault.put(ACME, "API_KEY", secret_token())
    # An hour's backoff: the task waits between attempts until the test lets the time pass.
    await setup.publish(ACME, "sync", SECRET_SEEN, secrets=("API_KEY",), max_attempts=3,
                        backoff_s=3600.0)
    task = await setup.enqueue(ACME, "sync", 1)
    # Gone after the enqueue, before any dispatch (no route deletes a secret yet; an
    # operator's SQL, a tenant erase or a replacement done as delete + put would).
    await admin_conn.execute("DELETE FROM secrets WHERE tenant_id = $1 AND name = 'API_KEY'",
                             ACME.value)
    dispatcher = setup.dispatcher()

    async def dispatched() -> bool:
        return bool(await setup.attempts(ACME, task)) or settled_now(
            await setup.store.get(ACME, task))
    await until(dispatched, "the task is dispatched once", WITHIN)
    assert (await setup.store.get(ACME, task)).status is not RunStatus.FAILED
    [first] = await setup.attempts(ACME, task)
    assert first["status"] == "retryable" and not first["killed_sandbox"], first
    assert first["error"].startswith("missing_secret: No secret named 'API_KEY'."), first
    waiting = await setup.store.get(ACME, task)
    # Back in the queue behind its backoff: not failed as the tenant's error, not dead.
    assert waiting.status is RunStatus.QUEUED and not waiting.dead_lettered, waiting
    assert waiting.last_error == first["error"] and waiting.error["ours"] is False
    assert await setup.facts(ACME, task) == []  # no sandbox was made, none billed

    value = secret_token()
    await setup.vault.put(ACME, "API_KEY", value)
    await admin_conn.execute("UPDATE runs SET available_at = now() WHERE run_id = $1",
                             task.uuid)  # the backoff has passed
    done = await setup.settled(ACME, task)
    assert done.status is RunStatus.FINISHED, done
    assert done.result == {"secret_sha": token_sha(value)}  # the value put back
    assert [a["status"] for a in await setup.attempts(ACME, task)] == ["retryable",
                                                                        "completed"]
    assert done.attempts == 2 and dispatcher.outcomes["error"] == 0
