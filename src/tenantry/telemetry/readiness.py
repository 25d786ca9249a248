"""``/readyz``: whether this process should be sent work now, with the reasons when not.

``/healthz`` is liveness (the process answers: a constant); ``/readyz`` asks what serving
needs — the database, its schema, a worker's session and sandbox boundary, the router's
directory — and answers 200 ``{"status":"ready"}`` or 503 problem+json of type ``unready``
listing the reasons (``Retry-After``: the process says when to ask again). Served by the
API, a standalone worker's metrics port and the router (docs/how-to/metrics.md).

The checks run at most once per :data:`CACHE_SECONDS` however many probes arrive (a
scrape storm costs the database one round of checks a second), and each has
:data:`CHECK_SECONDS` to answer: a database that hangs makes the process unready, not the
probe hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import asyncpg

from tenantry.db import DATABASE_DOWN
from tenantry.db.outage import one_line
from tenantry.jsonutil import dumps

if TYPE_CHECKING:  # the worker's step path imports the checks (runs/inprocess.py): it loads
    # no web stack before its first claim (tests/e2e/test_worker_start.py); answer() does.
    from starlette.responses import Response

#: What a database this process needs may raise when it is away, or refuses us.
REFUSED: tuple[type[Exception], ...] = (*DATABASE_DOWN, asyncpg.PostgresError)
#: A check: the reasons it found (none: fine).
Check = Callable[[], Awaitable[list[str]]]

CACHE_SECONDS = 1.0
CHECK_SECONDS = 2.0
RETRY_AFTER_SECONDS = 1
READY = b'{"status":"ready"}'


class Readiness:
    def __init__(self, checks: Sequence[tuple[str, Check]], *,
                 cache_seconds: float = CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``checks``: each with the name a timeout is reported under."""
        self._checks = list(checks)
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._at = -1e9
        self._reasons: list[str] = []

    async def reasons(self) -> list[str]:
        # Probes arriving while the checks run wait for them, then share their answer.
        async with self._lock:
            if self._clock() - self._at >= self._cache_seconds:
                self._reasons = [reason for name, check in self._checks
                                 for reason in await _bounded(name, check)]
                self._at = self._clock()
            return self._reasons

    async def answer(self) -> Response:
        return answer(await self.reasons())


async def _bounded(name: str, check: Check) -> list[str]:
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            return await check()
    except TimeoutError:
        return [f"{name}: no answer within {CHECK_SECONDS:g} s"]


def answer(reasons: list[str]) -> Response:
    from starlette.responses import Response

    if not reasons:
        return Response(READY, media_type="application/json")
    body = {"type": "unready", "title": "Not ready", "status": 503,
            "detail": "; ".join(reasons), "reasons": reasons}
    return Response(dumps(body), status_code=503, media_type="application/problem+json",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def sessions(holds: Callable[[], Sequence[bool]]) -> Check:
    """A process that runs worker loops: each holds its session connection (LISTEN and its
    session lock, ADR 0018); a loop without one claims nothing. ``holds``: one flag per
    loop running (none yet: not ready either)."""

    async def check() -> list[str]:
        flags = holds()
        if not flags:
            return ["workers: no worker loop running yet"]
        lost = flags.count(False)
        return [f"workers: {lost} of {len(flags)} worker loop(s) hold no worker session "
                "(claiming nothing until the database answers)"] if lost else []

    return check


def fixed(reason: str | None) -> Check:
    """A fact settled at start (the sandbox boundary in force): a reason or none."""

    async def check() -> list[str]:
        return [reason] if reason else []

    return check


def reachable(name: str, probe: Callable[[], Awaitable[object]]) -> Check:
    """A database this process needs answers ``probe`` (a ``SELECT 1``); one that refuses
    (dropped, a login gone) is no readier than one away."""

    async def check() -> list[str]:
        try:
            await probe()
        except REFUSED as exc:
            return [f"{name}: not answering ({one_line(exc)})"]
        return []

    return check
