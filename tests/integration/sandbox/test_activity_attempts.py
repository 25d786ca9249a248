"""One attempt of a tenant's activity in a fresh sandbox, on every backend: it completes with
its result and saw its input and key; it sees only the secrets it was given (never another
secret or the platform's), and none of them in a file; hostile payloads (segfault, memory
bomb, fork bomb, infinite loop, `rm -rf /`) end retryable and the next attempt gets a fresh
sandbox; a raise, an exit code, a bad result map to their outcomes; cancellation and
silence kill the sandbox."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import pytest

from tenantry.activities import AttemptOutcome, AttemptRequest, Bundle, run_attempt
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import Binding
from tenantry.sandbox.pool import PooledDriver
from tests.support.activities import FORK_BOMB, LOOP, MEMORY_BOMB, SEGFAULT
from tests.support.activity_rig import RecordingDriver
from tests.support.sandbox import (
    BOMBS_LOSE_THE_SANDBOX,
    TEST_LIMITS,
    secret_token,
    token_sha,
)

pytestmark = pytest.mark.timeout(600)

TENANT = TenantId("tenant-acts")


def request(driver: PooledDriver, code: str, **fields: Any) -> AttemptRequest:
    values: dict[str, Any] = {
        "tenant": TENANT, "task_id": "tsk_1", "attempt": 1, "activity": "send_invoice",
        "version": 1, "input": {"n": 1}, "timeout_s": 15.0,
        "limits": TEST_LIMITS[driver.backend],
        "bundle": Bundle({"main.py": textwrap.dedent(code).encode()}, "main.py:handle")}
    return AttemptRequest(**{**values, **fields})


async def attempt(driver: PooledDriver | RecordingDriver, req: AttemptRequest, **kw: Any
                  ) -> AttemptOutcome:
    return await run_attempt(driver, req, heartbeat=kw.pop("heartbeat", None), **kw)


async def test_an_activity_completes_with_its_result_input_and_key(
    driver: PooledDriver,
) -> None:
    code = """
        import os
        from lib.double import double
        def handle(value, context):
            print("hello from the step")
            return {"doubled": double(value["n"]), "key": context.idempotency_key,
                    "env_key": os.environ["ACTIVITY_IDEMPOTENCY_KEY"],
                    "attempt": context.attempt, "task": context.task_id}
    """
    bundle = Bundle({"main.py": textwrap.dedent(code).encode(),
                     "lib/double.py": b"def double(n):\n    return 2 * n\n"}, "main.py:handle")
    req = request(driver, "", bundle=bundle, input={"n": 21}, attempt=2)
    outcome = await attempt(driver, req)
    assert outcome.status == "completed", outcome
    assert outcome.result == {"doubled": 42, "key": "tsk_1:send_invoice",
                              "env_key": "tsk_1:send_invoice", "attempt": 2, "task": "tsk_1"}
    assert outcome.stdout == "hello from the step\n"
    assert outcome.exit_code == 0 and outcome.error is None and not outcome.killed_sandbox
    assert outcome.backend == driver.backend


#: Dumps the environment and reads every readable file under / (bounded), then reports the
#: hash of every token shaped like the test's values (``tnt`` + 32 hex) and where it was:
#: the guest is never told a value it should not see, so it cannot leak one by the test.
DUMP = r'''
import hashlib, os, re, stat

TOKEN = re.compile(rb"tnt[0-9a-f]{32}")
SKIP = {"/usr", "/lib", "/lib64", "/bin", "/sbin", "/sys", "/dev", "/proc/kcore",
        "/proc/kmsg", "/proc/sys", "/proc/sysrq-trigger"}

def handle(value, context):
    found = {}
    def note(data, where):
        for token in set(TOKEN.findall(data)):
            found.setdefault(hashlib.sha256(token).hexdigest(), where)
    note("\n".join(f"{k}={v}" for k, v in os.environ.items()).encode(), "os.environ")
    files = 0
    def read(path):
        nonlocal files
        files += 1
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                note(os.read(fd, 1 << 16), path)
        except OSError:
            pass
        finally:
            os.close(fd)
    for top in sorted(os.listdir("/")):
        path = "/" + top
        if path in SKIP or os.path.islink(path):
            continue
        if not os.path.isdir(path):
            read(path)
            continue
        for root, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP and d != "task"]
            for name in names:
                if files < 6000:
                    read(os.path.join(root, name))
    return {"found": found, "files": files}
'''


async def test_the_step_sees_only_its_scoped_secret_and_nothing_of_the_platform(
    driver: PooledDriver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    scoped, unscoped, other_tenant, canary = (secret_token() for _ in range(4))
    platform = {name: secret_token() for name in (
        "TENANTRY_MASTER_KEY", "TENANTRY_OPERATOR_TOKEN", "TENANTRY_DATABASE_URL",
        "TENANTRY_TASK_TOKEN")}
    for name, value in {**platform, "ACME_UNSCOPED_SECRET": unscoped,
                        "OTHER_TENANT_SECRET": other_tenant}.items():
        monkeypatch.setenv(name, value)
    # The pooled sandbox was started before these were set: take it, so the attempt's
    # sandbox is one the backend started with the platform's values in its environment.
    spent = await driver.create(Binding(TENANT, RunId.new()), TEST_LIMITS[driver.backend])
    await spent.destroy()

    outcome = await attempt(driver, request(driver, DUMP, secrets={"API_KEY": scoped},
                                            input={"canary": canary}))
    assert outcome.status == "completed", outcome
    found: dict[str, str] = outcome.result["found"]
    # The positive controls: the scoped secret in the environment, the input's canary in
    # the work directory's files (the walk reads files where the step's data is).
    assert found.pop(token_sha(scoped)) == "os.environ"
    assert found.pop(token_sha(canary)).endswith("/input.json")
    names = {token_sha(v): n for n, v in {**platform, "unscoped": unscoped,
                                     "other tenant": other_tenant}.items()}
    assert found == {}, [names.get(h, "an unknown token") + " at " + w
                         for h, w in found.items()]
    assert outcome.result["files"] > 100  # it did walk /proc, /etc, ...


async def test_no_secret_is_left_in_a_file_or_on_stdin_when_the_step_starts(
    driver: PooledDriver,
) -> None:
    code = """
        import os, sys
        def handle(value, context):
            return {"work": sorted(os.listdir(".")), "tmp": sorted(os.listdir("/tmp")),
                    "stdin": sys.stdin.read(), "secret": os.environ.get("API_KEY")}
    """
    outcome = await attempt(driver, request(driver, code, secrets={"API_KEY": "s3cr3t-a"}))
    assert outcome.status == "completed", outcome
    assert outcome.result == {"work": ["bundle", "input.json"], "tmp": [], "stdin": "",
                              "secret": "s3cr3t-a"}


RM_RF = """
    import shutil
    def handle(value, context):
        shutil.rmtree("/", ignore_errors=True)
        return "survived"
"""
#: Left by each hostile payload first: the next attempt must not find it.
MARK = 'open("/tmp/poisoned", "w").write("x")\nopen("poisoned", "w").write("x")\n'
FRESH = """
    import os
    def handle(value, context):
        return [os.path.exists("/tmp/poisoned"), os.path.exists("poisoned")]
"""


#: The error codes each payload may end with. A fork bomb's processes spin until the
#: timeout or, in a small guest, run it out of memory first.
@pytest.mark.parametrize(("payload", "error"), [
    (SEGFAULT, ("crashed: SIGSEGV",)), (MEMORY_BOMB, ("killed",)),
    (FORK_BOMB, ("timeout", "killed")), (LOOP, ("timeout",)), (RM_RF, None)],
    ids=["segfault", "memory", "fork", "loop", "rm-rf"])
async def test_hostile_payloads_end_retryable_and_the_next_attempt_is_fresh(
    driver: PooledDriver, payload: str, error: tuple[str, ...] | None,
) -> None:
    if driver.backend in BOMBS_LOSE_THE_SANDBOX and payload in (MEMORY_BOMB, FORK_BOMB):
        error = ("sandbox_lost",)  # the host's cgroup kills the whole sandbox
    code = MARK + textwrap.dedent(payload)
    bad = await attempt(driver, request(driver, code, timeout_s=4.0))
    if error is None:  # rm -rf /: it goes as far as the sandbox lets it, then returns
        assert bad.status in ("completed", "failed", "retryable"), bad
    else:
        assert (bad.status, bad.killed_sandbox) == ("retryable", True), bad
        assert bad.error is not None and bad.error.startswith(error), bad
    good = await attempt(driver, request(driver, FRESH, attempt=2))
    assert good.status == "completed", good
    assert good.result == [False, False]
    assert good.sandbox_id != bad.sandbox_id


async def test_a_raise_an_exit_code_and_bad_results_map_to_their_outcomes(
    driver: PooledDriver,
) -> None:
    raising = await attempt(driver, request(driver, """
        def handle(value, context):
            raise ValueError("no such customer")
    """))
    assert (raising.status, raising.exit_code, raising.error) == ("failed", 1, "exit_code: 1")
    assert 'File "' in raising.stderr and "main.py" in raising.stderr
    assert "ValueError: no such customer" in raising.stderr
    assert "runner" not in raising.stderr  # the tenant's frames only

    exits = """
        import sys
        def handle(value, context):
            sys.exit(value["code"])
    """
    listed = await attempt(driver, request(driver, exits, input={"code": 75},
                                           retryable_exit_codes=frozenset({75})))
    assert (listed.status, listed.exit_code, listed.killed_sandbox) == ("retryable", 75, False)
    unlisted = await attempt(driver, request(driver, exits, input={"code": 3},
                                             retryable_exit_codes=frozenset({75})))
    assert (unlisted.status, unlisted.error) == ("failed", "exit_code: 3")

    not_json = await attempt(driver, request(driver, """
        def handle(value, context):
            return {1, 2}
    """))
    assert not_json.status == "failed" and not_json.exit_code == 0
    assert not_json.error is not None and not_json.error.startswith("invalid_result:")
    assert "not JSON" in not_json.stderr
    oversized = await attempt(driver, request(driver, """
        def handle(value, context):
            return "x" * 300_000
    """))
    assert oversized.status == "failed"
    assert oversized.error is not None and "over the 262144 byte cap" in oversized.error


async def test_cancelling_an_attempt_destroys_its_sandbox(driver: PooledDriver) -> None:
    recording = RecordingDriver(driver)
    started = asyncio.Event()

    async def beat() -> None:
        started.set()  # the execution is in flight in a live sandbox

    task = asyncio.create_task(attempt(recording, request(driver, """
        import time
        def handle(value, context):
            time.sleep(60)
    """), heartbeat=beat, heartbeat_every=0.1))
    await asyncio.wait_for(started.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (sandbox,) = recording.sandboxes
    pid = sandbox.instance.pid
    assert sandbox.destroyed and not sandbox.instance.alive
    assert pid is not None and not _running(pid)


async def test_a_heartbeat_that_raises_ends_the_attempt_and_its_sandbox(
    driver: PooledDriver,
) -> None:
    """The dispatcher lost the task's lease: its heartbeat raises, and nothing runs on."""
    recording = RecordingDriver(driver)

    class LeaseLost(Exception):
        pass

    async def lost() -> None:
        raise LeaseLost

    with pytest.raises(LeaseLost):
        await attempt(recording, request(driver, """
            import time
            def handle(value, context):
                time.sleep(60)
        """), heartbeat=lost, heartbeat_every=0.1)
    (sandbox,) = recording.sandboxes
    assert sandbox.destroyed and not sandbox.instance.alive


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


async def test_the_host_heartbeats_a_live_step_and_a_silent_one_is_killed(
    driver: PooledDriver,
) -> None:
    beats = 0

    async def beat() -> None:
        nonlocal beats
        beats += 1

    alive = await attempt(driver, request(driver, """
        import time
        def handle(value, context):
            for _ in range(6):
                time.sleep(0.3)
                context.heartbeat()
            return "done"
    """, heartbeat_timeout_s=2.0), heartbeat=beat, heartbeat_every=0.2)
    assert (alive.status, alive.result) == ("completed", "done"), alive
    assert beats > 0

    silent = await attempt(driver, request(driver, """
        import time
        def handle(value, context):
            time.sleep(60)
    """, heartbeat_timeout_s=1.0), heartbeat=beat, heartbeat_every=0.2)
    assert (silent.status, silent.killed_sandbox) == ("retryable", True), silent
    assert silent.error is not None and silent.error.startswith("heartbeat_timeout"), silent
