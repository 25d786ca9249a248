"""Containment, per backend, with real sandboxes: what model-written code must not be able
to do (reach a network, read the host, exhaust the host), what it must get (its own files,
fresh randomness), and that one sandbox serves exactly one run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.ids import RunId, TenantId
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.sandbox import Sandbox
from tenantry.sandbox.types import EXIT_KILLED, EXIT_TIMEOUT, Binding, SandboxLost
from tests.support.sandbox import BOMBS_LOSE_THE_SANDBOX, TEST_LIMITS, host_address

pytestmark = pytest.mark.timeout(300)


@contextlib.asynccontextmanager
async def sandbox(driver: PooledDriver, tenant: str = "tenant-a") -> AsyncIterator[Sandbox]:
    box = await driver.create(Binding(TenantId(tenant), RunId.new()),
                              TEST_LIMITS[driver.backend])
    try:
        yield box
    finally:
        await box.destroy()


async def test_no_network_of_any_kind(driver: PooledDriver) -> None:
    accepted: list[object] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(count, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    targets = [(host_address(), port), ("127.0.0.1", port), ("169.254.169.254", 80),
               ("1.1.1.1", 443), ("8.8.8.8", 53)]
    code = f"""
import json, socket
out = {{}}
for host, port in {targets!r}:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); out[f"{{host}}:{{port}}"] = "connected"
    except OSError as e:
        out[f"{{host}}:{{port}}"] = type(e).__name__
    finally:
        s.close()
try:
    socket.getaddrinfo("example.com", 443); out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
print(json.dumps(out))
"""
    try:
        async with sandbox(driver) as box:
            result = await box.run_python(code)
    finally:
        server.close()
        await server.wait_closed()
    assert result.exit_code == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert len(outcome) == len(targets) + 1
    assert "connected" not in outcome.values() and outcome["dns"] != "resolved", outcome
    assert accepted == []  # nothing reached the host, on any of its addresses


async def test_host_files_are_not_readable(driver: PooledDriver, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the host's secret")
    async with sandbox(driver) as box:
        result = await box.run_python(
            f"import os\nfor p in [{str(secret)!r}, '/root', '/etc/shadow']:\n"
            "    try:\n        print(p, open(p).read()[:40] if os.path.isfile(p) else "
            "os.listdir(p))\n    except OSError as e:\n        print(p, type(e).__name__)")
        escaped = await box.run_shell(f"cat {secret} ../../{secret} 2>&1; echo done")
    assert "the host's secret" not in result.stdout + escaped.stdout
    assert "done" in escaped.stdout


FORK_BOMB = ("import os, time\nn = 0\nwhile n < 5000:\n    try:\n        pid = os.fork()\n"
             "    except OSError as e:\n        print('stopped after', n, e.strerror); break\n"
             "    if pid == 0:\n        time.sleep(60); os._exit(0)\n    n += 1\n")
MEMORY_BOMB = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))"


async def _bomb_loses_only_its_sandbox(driver: PooledDriver, code: str) -> None:
    async with sandbox(driver) as box:
        with pytest.raises(SandboxLost):
            await box.run_python(code, timeout_s=20)
        assert not box.alive
    async with sandbox(driver) as fresh:  # the host and the pool carry on
        assert (await fresh.run_python("print('still here')")).stdout == "still here\n"


async def test_a_fork_bomb_stops_at_the_process_limit(driver: PooledDriver) -> None:
    if driver.backend in BOMBS_LOSE_THE_SANDBOX:
        await _bomb_loses_only_its_sandbox(driver, FORK_BOMB)
        return
    limit = TEST_LIMITS[driver.backend].pids
    async with sandbox(driver) as box:
        bomb = await box.run_python(FORK_BOMB, timeout_s=15)
        after = await box.run_python("print('still here')")
    assert bomb.exit_code == 0 and bomb.stdout.startswith("stopped after"), bomb
    assert int(bomb.stdout.split()[2]) <= limit
    assert after.stdout.strip() == "still here"


async def test_a_memory_bomb_is_killed_with_137(driver: PooledDriver) -> None:
    if driver.backend in BOMBS_LOSE_THE_SANDBOX:
        await _bomb_loses_only_its_sandbox(driver, MEMORY_BOMB)
        return
    async with sandbox(driver) as box:
        bomb = await box.run_python(MEMORY_BOMB, timeout_s=20)
        after = await box.run_python("print('still here')")
    assert bomb.exit_code == EXIT_KILLED and bomb.killed, bomb
    assert after.stdout.strip() == "still here"


async def test_an_infinite_loop_ends_with_124(driver: PooledDriver) -> None:
    async with sandbox(driver) as box:
        loop = await box.run_python("while True:\n    pass", timeout_s=2)
        shell = await box.run_shell("while :; do :; done", timeout_s=2)
        after = await box.run_shell("echo still here")
    assert (loop.exit_code, shell.exit_code) == (EXIT_TIMEOUT, EXIT_TIMEOUT)
    assert loop.timed_out and after.stdout.strip() == "still here"


async def test_a_crashed_sandbox_fails_the_step_not_the_worker(
    driver: PooledDriver, manager: SandboxManager
) -> None:
    """The process holding the sandbox dies mid-execution (a guest crash, a host OOM kill):
    that call reports the loss; the next call of the same run gets a fresh sandbox."""
    from tenantry.tools.builtin import BuiltinTools

    tools = BuiltinTools(manager)
    tenant, run = TenantId("tenant-a"), RunId.new()
    first = await tools.call(tenant, run, "run_shell", {"command": "echo before"})
    box, _ = await manager.for_run(tenant, run)
    assert first.ok and box.instance.pid is not None
    call = asyncio.create_task(tools.call(tenant, run, "run_python",
                                          {"code": "import time; time.sleep(30)"}))
    await asyncio.sleep(1.0)
    os.kill(box.instance.pid, signal.SIGKILL)
    crashed = await asyncio.wait_for(call, 30)
    assert not crashed.ok and "stopped during this call" in crashed.text
    again = await tools.call(tenant, run, "run_shell", {"command": "echo after"})
    assert again.ok and json.loads(again.text)["stdout"] == "after\n"
    assert again.sandbox["id"] != first.sandbox["id"]


async def test_two_tenants_never_see_each_others_files(manager: SandboxManager) -> None:
    a, _ = await manager.for_run(TenantId("tenant-a"), RunId.new())
    b, _ = await manager.for_run(TenantId("tenant-b"), RunId.new())
    assert a.id != b.id
    await a.write_file("secret-of-a.txt", b"a's data")
    listing = await b.list_files(".")
    # Everywhere but the kernel's and the read-only system trees (gVisor walks / slowly).
    search = await b.run_shell(
        "find / \\( -path /proc -o -path /sys -o -path /usr -o -path /dev \\) -prune "
        "-o -name 'secret-of-a*' -print 2>/dev/null; echo searched")
    assert "secret-of-a.txt" not in [e.name for e in listing]
    assert search.stdout.strip() == "searched"
    assert (await a.read_file("secret-of-a.txt"))[0] == b"a's data"


async def test_a_sandbox_is_never_handed_to_a_second_run(
    driver: PooledDriver, manager: SandboxManager
) -> None:
    tenant = TenantId("tenant-a")
    first_run, second_run = RunId.new(), RunId.new()
    first, created = await manager.for_run(tenant, first_run)
    same, created_again = await manager.for_run(tenant, first_run)
    assert created and not created_again and same is first
    second, _ = await manager.for_run(tenant, second_run)
    assert second.id != first.id
    await manager.end(tenant, first_run, None)
    with pytest.raises(SandboxLost):  # a destroyed sandbox serves nothing, to anyone
        await first.run_shell("echo reused")
    ids = {first.id, second.id}
    for _ in range(3):  # the pool hands out only instances it never handed out before
        async with sandbox(driver) as box:
            assert box.id not in ids
            ids.add(box.id)


async def test_clones_get_fresh_randomness_and_the_hosts_clock(driver: PooledDriver) -> None:
    """Clones of one snapshot start bit-identical: the claim must make them differ."""
    code = ("import os, random, time\n"
            "print(random.getrandbits(64), os.urandom(16).hex(), time.time())")
    async with sandbox(driver) as one, sandbox(driver) as two:
        first, second = await one.run_python(code), await two.run_python(code)
        now = time.time()
    assert first.exit_code == second.exit_code == 0
    assert first.stdout.split()[0] != second.stdout.split()[0]
    assert first.stdout.split()[1] != second.stdout.split()[1]
    for result in (first, second):  # not the template's save time (minutes or days ago)
        assert abs(float(result.stdout.split()[2]) - now) < 60


async def test_the_warm_pool_serves_claims_and_an_empty_one_still_does(
    driver: PooledDriver,
) -> None:
    await driver.pool.wait_full(180)
    async with sandbox(driver) as warm, sandbox(driver) as cold:
        assert warm.warm and not cold.warm  # the pool holds one here; the second paid
        results = [await warm.run_shell("echo ok"), await cold.run_shell("echo ok")]
    assert [r.stdout for r in results] == ["ok\n", "ok\n"]
    await driver.pool.wait_full(180)  # and it refills in the background


async def test_a_paused_sandbox_is_destroyed_promptly(driver: PooledDriver) -> None:
    """Pooled sandboxes are paused (frozen, stopped); destroying one must not wait on it."""
    instance = await driver.pool.backend.launch(TEST_LIMITS[driver.backend])
    await instance.pause()
    await instance.destroy()  # a hang here is the failure (the module's timeout)
    assert not instance.alive
