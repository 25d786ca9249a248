"""``tenantry up`` keeps the embedded Postgres it started running: if the server dies under
it (killed, out of memory, a crash), it is started again, on the same socket, so every pool
of the process reaches it once more and the API and workers carry on by themselves (their
pools reconnect; runs cut off resume once their leases lapse).

Its pid is checked about once a second; a restart waits the one backoff (1 s, doubling to
30 s while restarts keep failing). Each stop is one warning line, each restart attempt that
fails one more, and the server answering again one line: nothing in between."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tenantry.backoff import backoff
from tenantry.bootstrap.services import Service
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.errors import ConfigurationError

log = logging.getLogger("tenantry.db")

POLL_SECONDS = 1.0
FIRST_RESTART_SECONDS = 1.0
MAX_RESTART_SECONDS = 30.0


def keeper(embedded: EmbeddedPostgres, *, poll_seconds: float = POLL_SECONDS) -> Service:
    """The service that watches ``embedded`` (started by this process) until ``stop``."""

    async def keep(stop: asyncio.Event) -> None:
        while not await _stopped_within(stop, poll_seconds):
            reason = await asyncio.to_thread(embedded.gone)
            if reason is None:
                continue
            attempt = 0
            while reason is not None:
                attempt += 1
                # The bare schedule: what the log line says is what happens.
                delay = backoff(attempt, first=FIRST_RESTART_SECONDS,
                                cap=MAX_RESTART_SECONDS, jitter=False)
                log.warning("embedded Postgres stopped (%s); restarting in %g s",
                            reason, delay)
                if await _stopped_within(stop, delay):
                    return
                try:
                    await asyncio.to_thread(embedded.restart)
                except ConfigurationError:  # the server says why in its log, not pg_ctl
                    reason = f"restart {attempt} failed: {embedded.last_log_line()}"
                else:
                    reason = None
            log.warning("embedded Postgres is back (restarted after %d attempt(s))", attempt)

    return keep


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()

