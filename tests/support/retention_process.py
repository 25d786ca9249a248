"""A cleaner in a process of its own, for the stale-cleaner and chaos tests (which stop it
with SIGSTOP or kill it with SIGKILL). It prints ``batch <runs>`` after every batch and
``result <json>`` after every pass, flushed, so the test can follow it.

    python -m tests.support.retention_process DSN TENANT [--lease S] [--batch N]
        [--blobs DIR] [--blob-retry S] [--passes N]
        [--stop-after-batch N | --stop-before-batch N]

``--stop-after-batch N`` / ``--stop-before-batch N``: the process SIGSTOPs itself right
after its Nth batch committed (before it renews its lease) or right before it sends its
Nth batch — a pause at a known point between batches; the test sends SIGCONT.
``--passes 0``: passes until killed."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.retention.cleaner import Cleaner, CleanupSettings, PassResult
from tests.support.blob_stores import directory_blobs
from tests.support.db import login_dsn
from tests.support.harness import _die_with_parent

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(slots=True)
class HookedCleaner(Cleaner):
    """A Cleaner that awaits ``before_batch(n)`` right before it sends its nth batch
    statement: a known point between batches, for tests to act at."""

    before_batch: Callable[[int], Awaitable[None]] | None = None
    sent: int = 0

    async def _fenced(self, result: PassResult, query: str, *args: object,
                      ) -> asyncpg.Record | None:
        if "tenantry_retention_batch" in query:
            self.sent += 1
            if self.before_batch is not None:
                await self.before_batch(self.sent)
        return await Cleaner._fenced(self, result, query, *args)


def _stop_myself() -> None:
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("tenant")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--blobs", type=Path)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--blob-retry", type=float, default=60.0)
    p.add_argument("--stop-after-batch", type=int, default=0)
    p.add_argument("--stop-before-batch", type=int, default=0)
    args = p.parse_args(argv)
    db = await Database.connect(login_dsn(args.dsn), min_size=1, max_size=2)
    # Its blobs' registry on its own pool, as a cleaner process has (the object store:
    # the directory the test shares with it).
    blobs = directory_blobs(db, args.blobs) if args.blobs else None

    async def before_batch(n: int) -> None:
        if n == args.stop_before_batch:
            _stop_myself()

    cleaner = HookedCleaner(db, blobs, CleanupSettings(batch=args.batch,
                                                       lease_seconds=args.lease,
                                                       blob_retry_seconds=args.blob_retry),
                            before_batch=before_batch)
    batches = 0

    def progress(result: PassResult) -> None:
        nonlocal batches
        batches += 1
        print(f"batch {result.runs}", flush=True)
        if batches == args.stop_after_batch:
            _stop_myself()

    try:
        done = 0
        while args.passes == 0 or done < args.passes:
            results = await cleaner.run_once([TenantId(args.tenant)], progress=progress)
            out: dict[str, Any] = (dataclasses.asdict(results[0]) if results
                                   else {"held_by_another": True})
            out["tenant"] = args.tenant
            print("result " + json.dumps(out), flush=True)
            done += 1
            if not results or not results[0].runs:  # held by another, or done: wait a bit
                await asyncio.sleep(0.1)
    finally:
        await db.close()
    return 0


@dataclasses.dataclass(slots=True)
class CleanerProcess:
    process: asyncio.subprocess.Process
    lines: list[str] = dataclasses.field(default_factory=list)

    async def line(self) -> str:
        """The next line it printed ('' once it exited)."""
        assert self.process.stdout is not None
        raw = await self.process.stdout.readline()
        text = raw.decode().rstrip("\n")
        if text:
            self.lines.append(text)
        return text

    async def until_line(self, prefix: str) -> str:
        while True:
            text = await self.line()
            if text.startswith(prefix):
                return text
            if not text:
                raise AssertionError(f"the cleaner exited before {prefix!r}: {self.lines}")

    async def stopped(self) -> None:
        """Wait until it has stopped itself (state T in /proc)."""
        await self.until_line("stopping")
        while True:
            if _state(self.process.pid) in ("T", "t"):
                return
            await asyncio.sleep(0.01)

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(x.removeprefix("result ")) for x in self.lines
                if x.startswith("result ")]

    async def rest(self) -> tuple[int, str]:
        """Read to the end; its exit code and stderr."""
        while await self.line():
            pass
        assert self.process.stderr is not None
        err = (await self.process.stderr.read()).decode()
        return await self.process.wait(), err


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


@contextlib.asynccontextmanager
async def cleaner_process(dsn: str, tenant: str, *options: str) -> AsyncIterator[CleanerProcess]:
    """This module as a process (killed at the block's end if it still runs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                         env.get("PYTHONPATH", "")])
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.retention_process", dsn, tenant, *options,
        cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent)
    try:
        yield CleanerProcess(process)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.kill()
            await process.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
